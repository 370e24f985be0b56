// StepProfiler: a Kineto trace (CPU operators and, on GPUs, CUDA kernels, memcpys and NCCL) of
// a few training steps, written as Chrome-trace JSON (chrome://tracing, Perfetto, or
// bench/gpu/trace_summary.py). The C++ side of what torch.profiler does in Python.
//
// begin_step(n) starts recording before step n == first; end_step(n) stops after step
// first + count - 1 and writes the file. Failures (a LibTorch without Kineto such as Debian's
// 1.13, which fails only when the trace is saved; an unwritable path) are reported once on
// stderr ("cannot start the profiler" / "cannot write the profile") and end profiling; training
// goes on.
// Thread safety: the training thread only (backward's threads inherit the profiler state).
#pragma once

#include <cstdint>
#include <string>

namespace elastic::trainer {

class StepProfiler {
 public:
  // Disabled when `path` is empty.
  StepProfiler(std::string path, std::int64_t first, std::int64_t count, bool cuda);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void begin_step(std::int64_t n);
  void end_step(std::int64_t n);

 private:
  std::string path_;
  std::int64_t first_, count_;
  bool cuda_;
  bool active_ = false;
};

}  // namespace elastic::trainer
