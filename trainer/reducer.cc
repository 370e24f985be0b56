#include "trainer/reducer.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace elastic::trainer {

BucketReducer::BucketReducer(std::vector<torch::Tensor> parameters, Backend& backend,
                             const ReducerOptions& options)
    : parameters_(std::move(parameters)), backend_(backend), options_(options) {
  slots_.resize(parameters_.size());
  // Reverse registration order approximates the order in which backward finishes gradients.
  std::vector<std::vector<std::size_t>> groups;
  std::int64_t group_bytes = 0;
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    const auto& p = parameters_[i];
    const std::int64_t bytes = p.numel() * static_cast<std::int64_t>(p.element_size());
    // The group being filled is the first one while groups.size() == 1.
    const std::int64_t cap = groups.size() == 1
                                 ? std::min(options_.first_bucket_bytes, options_.bucket_bytes)
                                 : options_.bucket_bytes;
    const bool same_kind = !groups.empty() && !groups.back().empty() &&
                           parameters_[groups.back().front()].dtype() == p.dtype() &&
                           parameters_[groups.back().front()].device() == p.device();
    if (groups.empty() || !same_kind || group_bytes >= cap) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(i);
    group_bytes += bytes;
  }
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    bucket.params = groups[b];
    std::int64_t numel = 0;
    for (std::size_t i : bucket.params) {
      slots_[i] = Slot{b, numel, false};
      numel += parameters_[i].numel();
    }
    const bool last = b + 1 == groups.size();
    if (last) control_offset_ = numel;
    const auto& first = parameters_[bucket.params.front()];
    bucket.buffer =
        torch::zeros({numel + (last ? kControlSlots : 0)},
                     torch::TensorOptions().dtype(first.dtype()).device(first.device()));
    stats_.bytes += bucket.buffer.numel() * static_cast<std::int64_t>(bucket.buffer.element_size());
    buckets_.push_back(std::move(bucket));
  }
  stats_.buckets = static_cast<int>(buckets_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    hooks_.push_back(parameters_[i].register_hook(
        [this, i](const torch::Tensor& grad) { on_gradient(i, grad); }));
  }
}

BucketReducer::~BucketReducer() {
  // Hooks hold `this`; the parameters may outlive the reducer (the model does), so remove them.
  for (std::size_t i = 0; i < parameters_.size(); ++i) parameters_[i].remove_hook(hooks_[i]);
}

void BucketReducer::prepare() {
  for (auto& bucket : buckets_) {
    bucket.buffer.zero_();
    bucket.pending = bucket.params.size();
    bucket.launched = false;
    bucket.work.reset();
  }
  for (auto& slot : slots_) slot.arrived = false;
  next_launch_ = 0;
}

void BucketReducer::set_control(int slot, float value) {
  TORCH_CHECK(slot >= 0 && slot < kControlSlots, "control slot out of range");
  buckets_.back().buffer[control_offset_ + slot].fill_(value);
}

void BucketReducer::set_control(int slot, const torch::Tensor& value) {
  TORCH_CHECK(slot >= 0 && slot < kControlSlots, "control slot out of range");
  torch::NoGradGuard no_grad;
  buckets_.back().buffer.narrow(0, control_offset_ + slot, 1).copy_(value.reshape({1}));
}

void BucketReducer::on_gradient(std::size_t param, const torch::Tensor& grad) {
  Slot& slot = slots_[param];
  Bucket& bucket = buckets_[slot.bucket];
  torch::NoGradGuard no_grad;
  bucket.buffer.narrow(0, slot.offset, grad.numel()).add_(grad.reshape({-1}));
  if (slot.arrived) return;  // a second contribution: already counted
  slot.arrived = true;
  if (--bucket.pending == 0 && options_.overlap) launch_ready_buckets();
}

void BucketReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch(buckets_[next_launch_++]);
  }
}

void BucketReducer::launch(Bucket& bucket) {
  std::vector<at::Tensor> tensors{bucket.buffer};
  bucket.work = backend_.allreduce(tensors);
  bucket.launched = true;
}

std::vector<float> BucketReducer::finish() {
  // Buckets whose parameters got no gradient (unused, or an empty local batch) still take part:
  // their zeros keep every rank's collectives aligned.
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  const auto start = std::chrono::steady_clock::now();
  for (auto& bucket : buckets_) bucket.work->wait();
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    auto& p = parameters_[i];
    const Slot& slot = slots_[i];
    auto reduced = buckets_[slot.bucket].buffer.narrow(0, slot.offset, p.numel()).view_as(p);
    if (p.grad().defined()) {
      p.mutable_grad().copy_(reduced);
    } else {
      p.mutable_grad() = reduced.clone();
    }
  }
  auto control = buckets_.back()
                     .buffer.narrow(0, control_offset_, kControlSlots)
                     .to(torch::kCPU, torch::kFloat)
                     .contiguous();
  return std::vector<float>(control.data_ptr<float>(), control.data_ptr<float>() + kControlSlots);
}

}  // namespace elastic::trainer
