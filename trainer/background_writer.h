// BackgroundWriter: runs rank 0's checkpoint writes on one thread of its own, one at a time, so
// that serialising, writing and fsyncing a checkpoint never holds up the training thread.
//
// The training thread hands over a job (try_start) and goes on; the job's outcome is collected
// later on the training thread (take_outcome), so logging and progress reports stay on it.
// At most one job is in flight: try_start() refuses a second one (the caller decides what a
// refusal means; the trainer skips that checkpoint), which also lets the caller reuse the
// buffers a job reads from as soon as the writer is idle again.
//
// The writer thread runs at a lower CPU priority (nice +10) than the training threads, so on a
// host whose cores are all busy the write takes the time training leaves rather than slowing
// the steps it overlaps.
//
// Ownership: a job owns (or shares) everything it touches; if the writer is destroyed while a
// job still runs after the caller's bounded wait_idle() gave up, the thread is detached and the
// job finishes (or the process exits) on its own. Thread safety: every method is for one owning
// thread; the job runs on the writer's thread. Dependency-free (no LibTorch) so it is unit
// tested on its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "daemon/core/result.h"

namespace elastic::trainer {

class BackgroundWriter {
 public:
  // A job returns the published checkpoint's directory, or an Error saying why not.
  using Job = std::function<Result<std::string>()>;
  struct Outcome {
    std::int64_t step = 0;
    Result<std::string> dir = Error{"not run"};
    double seconds = 0;  // wall time of the job on the writer thread
  };

  BackgroundWriter();
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  // True from try_start() until the job has returned.
  bool busy() const;
  // Runs `job` (the checkpoint of `step`) on the writer thread; false, and `job` is dropped,
  // while another job is in flight.
  bool try_start(std::int64_t step, Job job);
  // The outcome of the job that finished last, once; nullopt while none finished since the
  // last call. Take it before the next try_start(): a newer outcome replaces an untaken one.
  std::optional<Outcome> take_outcome();
  // Waits until no job is in flight, at most `timeout`; true when idle.
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace elastic::trainer
