// BucketReducer: data-parallel gradient all-reduce in buckets, overlapped with backward (the
// scheme of PyTorch DDP, written for the C++ trainer).
//
// Parameters are grouped into buckets of about `bucket_bytes`, in reverse registration order
// (roughly the order backward produces their gradients; the first bucket is small so the first
// all-reduce starts early). A hook on every parameter copies its gradient into the bucket's flat
// buffer (each parameter's slot starts at a 16-element boundary, so vector loads stay aligned);
// once a bucket is complete its asynchronous all-reduce is launched at once, while backward goes
// on computing earlier layers. Buckets are launched strictly in index order, so every rank issues
// the same collectives in the same order. With overlap off the same buckets are all-reduced only
// after backward, which gives bit-identical results. After finish() every parameter's .grad IS
// its slot of the reduced bucket (an alias, no copy: DDP's gradient_as_bucket_view); prepare()
// drops them again, so the next backward never accumulates into a bucket.
//
// The caller scales its loss so that a SUM across ranks is the global mean (the trainer divides
// by the global batch), so ranks with uneven or empty batches still combine exactly.
// kControlSlots extra elements at the end of the last bucket carry per-rank control values that
// are summed with the gradients, without a collective of their own: the trainer uses them to
// agree on stopping after SIGTERM, to report the global loss and to agree on the step after
// which a healthy group is left for the next round. finish() only starts copying
// them to the host (pinned memory, a CUDA event); control(1) reads the previous step's values,
// which are there by then, so a training loop that acts on them one step late never makes the
// host wait for the GPU. control(0) waits for the current step's (a host synchronisation).
//
// With `time_collectives` (and TORCH_NCCL_ENABLE_TIMING=1, LibTorch 2.x) the GPU time of every
// all-reduce is read from its CUDA events once its step's control values are read, giving the
// all-reduce bus bandwidth the trainer reaches.
//
// Lifecycle per step: prepare() -> forward/backward (hooks fire) -> finish() -> control().
// Thread safety: hooks run on the autograd thread; prepare/finish/control on the training
// thread, which waits for backward to complete in between. Not for concurrent steps.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <c10/core/Event.h>

#include <torch/torch.h>

#include "trainer/torch_compat.h"

namespace elastic::trainer {

struct ReducerOptions {
  std::int64_t bucket_bytes = 25 << 20;       // DDP's default bucket cap
  std::int64_t first_bucket_bytes = 1 << 20;  // small, so communication starts early
  bool overlap = true;
  bool time_collectives = false;  // read each all-reduce's GPU time (see above)
  // Called with true before the host waits for the step's collectives (finish()'s waits,
  // control()'s wait for the copy) and with false after: the worker channel tells hang detection
  // that this rank waits for its peers, not in its own work. Empty: not called.
  std::function<void(bool)> waiting;
};

// A wait for the peers, bracketed by waiting(true) and waiting(false), exceptions too (an empty
// function: nothing). `waiting` must outlive the mark.
class WaitingMark {
 public:
  explicit WaitingMark(const std::function<void(bool)>& waiting) : waiting_(waiting) {
    if (waiting_) waiting_(true);
  }
  ~WaitingMark() {
    if (waiting_) waiting_(false);
  }
  WaitingMark(const WaitingMark&) = delete;
  WaitingMark& operator=(const WaitingMark&) = delete;

 private:
  const std::function<void(bool)>& waiting_;
};

struct ReducerStats {
  int buckets = 0;
  std::int64_t bytes = 0;
  double wait_seconds = 0;          // host time finish() spent in Work::wait() (on NCCL: ~0)
  double control_wait_seconds = 0;  // host time control() spent waiting for the GPU
  // With time_collectives: steps timed, the GPU seconds of their all-reduces, and the bytes
  // a ring all-reduce moves per rank for them (2(n-1)/n of the data: bus bandwidth = ratio).
  std::int64_t timed_steps = 0;
  double collective_seconds = 0;
  double collective_bus_bytes = 0;
};

class BucketReducer {
 public:
  BucketReducer(std::vector<torch::Tensor> parameters, Backend& backend,
                const ReducerOptions& options);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  static constexpr int kControlSlots = 3;

  // Readies the buckets for one step (control values start at 0).
  void prepare();
  // Sets control value `slot` of this rank; call before backward. A tensor is copied on the
  // device, without a host synchronisation.
  void set_control(int slot, float value);
  void set_control(int slot, const torch::Tensor& value);
  // Launches what is left, makes the device wait for every bucket, points every parameter's
  // .grad at its reduced slot and starts copying the summed control values to the host. Throws
  // what the backend throws (a lost peer).
  void finish();
  // The control values summed over all ranks of the step `steps_ago` finish() calls back: 0 the
  // last, 1 the one before (zeros if there was none). Waits until they are on the host.
  std::vector<float> control(int steps_ago);

  const ReducerStats& stats() const { return stats_; }
  // Forgets the timings so far (the trainer leaves its warm-up steps out).
  void reset_timing();

 private:
  struct Bucket {
    torch::Tensor buffer;             // flat, contiguous, what is all-reduced
    std::vector<std::size_t> params;  // indices into parameters_
    std::size_t pending = 0;          // gradients still to arrive this step
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct Slot {
    std::size_t bucket = 0;
    std::int64_t offset = 0;
    bool arrived = false;
  };

  // One finish()'s control values on their way to the host, and its collectives (for timing).
  struct ControlCopy {
    torch::Tensor host;                // kControlSlots floats, pinned for CUDA
    std::optional<c10::Event> copied;  // recorded after the copy (device tensors only)
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
  };

  void on_gradient(std::size_t param, const torch::Tensor& grad);
  void launch_ready_buckets();
  void launch(Bucket& bucket);

  std::vector<torch::Tensor> parameters_;
  Backend& backend_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::vector<unsigned> hooks_;  // handles of the hooks on parameters_, for removal
  std::size_t next_launch_ = 0;
  std::int64_t control_offset_ = 0;  // in the last bucket
  torch::Tensor control_device_;     // kControlSlots floats on the buckets' device
  ControlCopy copies_[2];            // by finish() count parity
  std::int64_t finished_ = 0;        // finish() calls so far
  double bus_factor_ = 0;            // 2(n-1)/n
  ReducerStats stats_;
};

}  // namespace elastic::trainer
