#include "trainer/profiling.h"

#include <cstdio>
#include <exception>
#include <set>

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

namespace elastic::trainer {
namespace {

namespace prof = torch::profiler::impl;

std::set<prof::ActivityType> activities(bool cuda) {
  std::set<prof::ActivityType> set{prof::ActivityType::CPU};
  if (cuda) set.insert(prof::ActivityType::CUDA);
  return set;
}

}  // namespace

StepProfiler::StepProfiler(std::string path, std::int64_t first, std::int64_t count, bool cuda)
    : path_(std::move(path)), first_(first), count_(count), cuda_(cuda) {}

StepProfiler::~StepProfiler() {
  if (active_) {
    try {
      torch::autograd::profiler::disableProfiler();
    } catch (const std::exception&) {
    }
  }
}

void StepProfiler::begin_step(std::int64_t n) {
  if (path_.empty() || n != first_) return;
  try {
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    torch::autograd::profiler::prepareProfiler(config, activities(cuda_));
    torch::autograd::profiler::enableProfiler(config, activities(cuda_));
    active_ = true;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "elastic-trainer: cannot start the profiler (%s); not profiling\n",
                 e.what_without_backtrace());
    path_.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic-trainer: cannot start the profiler (%s); not profiling\n",
                 e.what());
    path_.clear();
  }
}

void StepProfiler::end_step(std::int64_t n) {
  if (!active_ || n != first_ + count_ - 1) return;
  active_ = false;
  try {
    if (cuda_) torch::cuda::synchronize();  // so the last step's kernels are in the trace
    auto result = torch::autograd::profiler::disableProfiler();
    result->save(path_);
    std::fprintf(stderr, "elastic-trainer: profile of steps %lld..%lld written to %s\n",
                 static_cast<long long>(first_), static_cast<long long>(n), path_.c_str());
  } catch (const c10::Error& e) {  // LibTorch without Kineto (Debian's 1.13) ends up here
    std::fprintf(stderr, "elastic-trainer: cannot write the profile %s: %s\n", path_.c_str(),
                 e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic-trainer: cannot write the profile %s: %s\n", path_.c_str(),
                 e.what());
  }
  path_.clear();
}

}  // namespace elastic::trainer
