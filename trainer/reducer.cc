#include "trainer/reducer.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <c10/core/impl/VirtualGuardImpl.h>

namespace elastic::trainer {
namespace {

// Slot alignment in elements: 16 elements are >= 32 bytes for every dtype we train in, the
// vector width of the fused optimizer and of NCCL's copies.
constexpr std::int64_t kSlotAlign = 16;

std::int64_t aligned(std::int64_t numel) {
  return (numel + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
}

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

}  // namespace

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
      numel += aligned(parameters_[i].numel());
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
  const auto device = buckets_.back().buffer.device();
  control_device_ =
      torch::zeros({kControlSlots}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  for (auto& copy : copies_) {
    copy.host =
        torch::zeros({kControlSlots},
                     torch::TensorOptions().dtype(torch::kFloat).pinned_memory(device.is_cuda()));
    if (!device.is_cpu()) copy.copied.emplace(device.type());
  }
  const int world = backend_.getSize();
  bus_factor_ = world > 1 ? 2.0 * (world - 1) / world : 0.0;
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
  // The .grad views of the last finish() alias the buckets: were they left in place, autograd
  // would accumulate the next gradients into them on top of what the hooks add.
  for (auto& p : parameters_) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
  // No zeroing of the buckets: each gradient's first contribution is copied in, and finish()
  // zeroes the slots that got none. Padding between slots is never written, so stays zero.
  buckets_.back().buffer.narrow(0, control_offset_, kControlSlots).zero_();
  for (auto& bucket : buckets_) {
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
  auto target = bucket.buffer.narrow(0, slot.offset, grad.numel());
  if (slot.arrived) {  // a second contribution (already counted)
    target.add_(grad.reshape({-1}));
    return;
  }
  target.copy_(grad.reshape({-1}));
  slot.arrived = true;
  if (--bucket.pending == 0 && options_.overlap) launch_ready_buckets();
}

void BucketReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch(buckets_[next_launch_++]);
  }
}

void BucketReducer::launch(Bucket& bucket) {
  if (bucket.pending > 0) {  // launched by finish(): parameters without a gradient this step
    torch::NoGradGuard no_grad;
    for (std::size_t i : bucket.params) {
      if (!slots_[i].arrived)
        bucket.buffer.narrow(0, slots_[i].offset, parameters_[i].numel()).zero_();
    }
  }
  std::vector<at::Tensor> tensors{bucket.buffer};
  bucket.work = backend_.allreduce(tensors);
  bucket.launched = true;
}

void BucketReducer::finish() {
  // Buckets whose parameters got no gradient (unused, or an empty local batch) still take part:
  // their zeros keep every rank's collectives aligned.
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  const auto start = std::chrono::steady_clock::now();
  {
    WaitingMark mark(options_.waiting);
    for (auto& bucket : buckets_) bucket.work->wait();
  }
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    auto& p = parameters_[i];
    const Slot& slot = slots_[i];
    // An alias made with set_() rather than a view: autograd forbids some in-place calls on views
    // (LibTorch 1.13's zero_grad() detaches .grad in place).
    const auto& buffer = buckets_[slot.bucket].buffer;
    auto alias = torch::empty({0}, buffer.options());
    alias.set_(buffer.storage(), buffer.storage_offset() + slot.offset, p.sizes());
    p.mutable_grad() = alias;
  }
  ControlCopy& copy = copies_[finished_ % 2];
  control_device_.copy_(buckets_.back().buffer.narrow(0, control_offset_, kControlSlots));
  copy.host.copy_(control_device_, /*non_blocking=*/true);
  if (copy.copied) copy.copied->record(current_stream(control_device_.device()));
  copy.works.clear();
  if (options_.time_collectives) {
    for (auto& bucket : buckets_) copy.works.push_back(bucket.work);
  }
  ++finished_;
}

std::vector<float> BucketReducer::control(int steps_ago) {
  TORCH_CHECK(steps_ago == 0 || steps_ago == 1, "control(): steps_ago must be 0 or 1");
  if (finished_ <= steps_ago) return std::vector<float>(kControlSlots, 0.0f);
  ControlCopy& copy = copies_[(finished_ - 1 - steps_ago) % 2];
  if (copy.copied && !copy.copied->query()) {
    const auto start = std::chrono::steady_clock::now();
    WaitingMark mark(options_.waiting);
    while (!copy.copied->query()) std::this_thread::yield();
    stats_.control_wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // The event follows the waits on every all-reduce of that step, so their events are done.
  if (!copy.works.empty()) {
    double seconds = 0, bytes = 0;
    bool timed = true;
    for (auto& work : copy.works) {
      const float ms = collective_milliseconds(*work);
      if (ms < 0) timed = false;
      seconds += ms / 1000.0;
    }
    for (const auto& bucket : buckets_)
      bytes += static_cast<double>(bucket.buffer.numel() * bucket.buffer.element_size());
    if (timed) {
      ++stats_.timed_steps;
      stats_.collective_seconds += seconds;
      stats_.collective_bus_bytes += bytes * bus_factor_;
    }
    copy.works.clear();
  }
  const float* values = copy.host.data_ptr<float>();
  return std::vector<float>(values, values + kControlSlots);
}

void BucketReducer::reset_timing() {
  stats_.timed_steps = 0;
  stats_.collective_seconds = 0;
  stats_.collective_bus_bytes = 0;
  stats_.control_wait_seconds = 0;
}

}  // namespace elastic::trainer
