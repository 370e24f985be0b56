// BucketReducer: data-parallel gradient all-reduce in buckets, overlapped with backward (the
// scheme of PyTorch DDP, written for the C++ trainer).
//
// Parameters are grouped into buckets of about `bucket_bytes`, in reverse registration order
// (roughly the order backward produces their gradients; the first bucket is small so the first
// all-reduce starts early). A hook on every parameter copies its gradient into the bucket's flat
// buffer; once a bucket is complete its asynchronous all-reduce is launched at once, while
// backward goes on computing earlier layers. Buckets are launched strictly in index order, so
// every rank issues the same collectives in the same order. With overlap off the same buckets
// are all-reduced only after backward, which gives bit-identical results.
//
// The caller scales its loss so that a SUM across ranks is the global mean (the trainer divides
// by the global batch), so ranks with uneven or empty batches still combine exactly.
// kControlSlots extra elements at the end of the last bucket carry per-rank control values that
// are summed with the gradients, without a collective of their own: the trainer uses them to
// agree on stopping after SIGTERM and to report the global loss.
//
// Lifecycle per step: prepare() -> forward/backward (hooks fire) -> finish().
// Thread safety: hooks run on the autograd thread; prepare/finish on the training thread, which
// waits for backward to complete in between. Not for concurrent steps.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "trainer/torch_compat.h"

namespace elastic::trainer {

struct ReducerOptions {
  std::int64_t bucket_bytes = 25 << 20;       // DDP's default bucket cap
  std::int64_t first_bucket_bytes = 1 << 20;  // small, so communication starts early
  bool overlap = true;
};

struct ReducerStats {
  int buckets = 0;
  std::int64_t bytes = 0;
  double wait_seconds = 0;  // time finish() spent waiting for collectives (exposed comm)
};

class BucketReducer {
 public:
  BucketReducer(std::vector<torch::Tensor> parameters, Backend& backend,
                const ReducerOptions& options);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  static constexpr int kControlSlots = 2;

  // Readies the buckets for one step (control values start at 0).
  void prepare();
  // Sets control value `slot` of this rank; call before backward. A tensor is copied on the
  // device, without a host synchronisation.
  void set_control(int slot, float value);
  void set_control(int slot, const torch::Tensor& value);
  // Launches what is left, waits for every bucket, writes the reduced gradients into the
  // parameters' .grad, and returns the control values summed over all ranks. Throws what the
  // backend throws (a lost peer).
  std::vector<float> finish();

  const ReducerStats& stats() const { return stats_; }

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
  ReducerStats stats_;
};

}  // namespace elastic::trainer
