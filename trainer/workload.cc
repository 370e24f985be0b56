#include "trainer/workload.h"

#include "daemon/core/rng.h"
#include "trainer/data/idx_reader.h"

namespace elastic::trainer {
namespace {

constexpr double kFmnistMean = 0.2860;  // Fashion-MNIST training-set pixel statistics
constexpr double kFmnistStd = 0.3530;

torch::Tensor index_tensor(const std::vector<std::int64_t>& indices) {
  return torch::from_blob(const_cast<std::int64_t*>(indices.data()),
                          {static_cast<std::int64_t>(indices.size())}, torch::kLong)
      .clone();
}

// A host batch on its way to the device. For CUDA it goes through pinned memory and a
// non-blocking copy: a copy from pageable memory makes the host wait for the whole stream (all
// work queued before it), which would stop the host from running ahead of the GPU once per step.
// The pinned block is not reused before the copy is done (the caching host allocator records it).
torch::Tensor to_device(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

torch::Tensor images_to_tensor(const data::ImageSet& set, std::int64_t limit) {
  const std::int64_t count = limit > 0 ? std::min(limit, set.count) : set.count;
  auto bytes = torch::from_blob(const_cast<std::uint8_t*>(set.pixels.data()),
                                {count, 1, set.rows, set.cols}, torch::kUInt8);
  return (bytes.to(torch::kFloat) / 255.0 - kFmnistMean) / kFmnistStd;
}

torch::Tensor labels_to_tensor(const data::ImageSet& set, std::int64_t limit) {
  const std::int64_t count = limit > 0 ? std::min(limit, set.count) : set.count;
  return torch::from_blob(const_cast<std::uint8_t*>(set.labels.data()), {count}, torch::kUInt8)
      .to(torch::kLong);
}

class FmnistWorkload final : public Workload {
 public:
  FmnistWorkload(torch::Tensor train_x, torch::Tensor train_y, torch::Tensor test_x,
                 torch::Tensor test_y, torch::Device device)
      : device_(device),
        train_x_(std::move(train_x)),
        train_y_(std::move(train_y)),
        test_x_(std::move(test_x)),
        test_y_(std::move(test_y)) {
    model_->to(device_);
  }

  std::string name() const override { return "fmnist"; }
  std::int64_t train_size() const override { return train_x_.size(0); }
  torch::nn::Module& module() override { return *model_; }

  torch::Tensor scaled_loss(const std::vector<std::int64_t>& indices,
                            std::int64_t global_batch) override {
    auto idx = index_tensor(indices);
    auto x = to_device(train_x_.index_select(0, idx), device_);
    auto y = to_device(train_y_.index_select(0, idx), device_);
    auto loss = torch::nn::functional::cross_entropy(
        model_->forward(x), y,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    return loss / static_cast<double>(global_batch);
  }

  std::optional<double> evaluate(int rank, int world, Backend& backend,
                                 const std::function<void()>& working) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    std::int64_t correct = 0, seen = 0;
    constexpr std::int64_t kChunk = 1000;
    auto mine = torch::arange(rank, test_x_.size(0), world, torch::kLong);
    for (std::int64_t i = 0; i < mine.size(0); i += kChunk) {
      auto idx = mine.slice(0, i, std::min(i + kChunk, mine.size(0)));
      auto predicted = model_->forward(test_x_.index_select(0, idx).to(device_)).argmax(1).cpu();
      correct += predicted.eq(test_y_.index_select(0, idx)).sum().item<std::int64_t>();
      seen += idx.size(0);
      if (working) working();
    }
    model_->train();
    std::vector<at::Tensor> counts{
        torch::tensor({static_cast<double>(correct), static_cast<double>(seen)},
                      torch::TensorOptions().dtype(torch::kDouble))
            .to(device_)};
    backend.allreduce(counts)->wait();
    auto total = counts[0].cpu();
    return total[0].item<double>() / total[1].item<double>();
  }

 private:
  torch::Device device_;
  FashionCnn model_;
  torch::Tensor train_x_, train_y_, test_x_, test_y_;
};

class GptWorkload final : public Workload {
 public:
  GptWorkload(const GptOptions& options, torch::Device device, torch::Dtype dtype)
      : options_(options), device_(device), model_(options.shape) {
    sequence_ = options_.sequence > 0 ? options_.sequence : options_.shape.context;
    TORCH_CHECK(sequence_ + 1 <= options_.shape.context + 1, "sequence longer than the context");
    model_->to(device_, dtype);
  }

  std::string name() const override { return "gpt"; }
  std::int64_t train_size() const override { return options_.train_size; }
  torch::nn::Module& module() override { return *model_; }

  // Sample i is an arithmetic progression modulo the vocabulary with a per-sample start and
  // stride: learnable (the loss falls) yet cheap to make.
  torch::Tensor scaled_loss(const std::vector<std::int64_t>& indices,
                            std::int64_t global_batch) override {
    const auto batch = static_cast<std::int64_t>(indices.size());
    const std::int64_t vocab = options_.shape.vocab;
    // The tokens are written into a tensor that owns its memory: autograd keeps the input and
    // target alive until backward (the embedding and the loss read them there), so they must
    // never alias a buffer of this function (from_blob on a local vector, which .to(kCPU) does
    // not copy, was read after it was freed: 2-rank CPU runs were not reproducible).
    auto host =
        torch::empty({batch, sequence_ + 1},
                     torch::TensorOptions().dtype(torch::kLong).pinned_memory(device_.is_cuda()));
    std::int64_t* tokens = host.data_ptr<std::int64_t>();
    for (std::int64_t b = 0; b < batch; ++b) {
      std::uint64_t state =
          options_.data_seed * 0x100000001b3ULL + static_cast<std::uint64_t>(indices[b]);
      const auto start =
          static_cast<std::int64_t>(splitmix64(state) % static_cast<std::uint64_t>(vocab));
      const auto stride = 1 + static_cast<std::int64_t>(splitmix64(state) % 7);
      for (std::int64_t t = 0; t <= sequence_; ++t) {
        tokens[b * (sequence_ + 1) + t] = (start + stride * t) % vocab;
      }
    }
    auto all = to_device(host, device_);  // already pinned for CUDA: no second copy
    auto input = all.slice(1, 0, sequence_);
    auto target = all.slice(1, 1, sequence_ + 1);
    auto logits = model_->forward(input).to(torch::kFloat);
    // Per-sample loss = mean over its tokens; summed over samples, scaled by the global batch.
    auto loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}), target.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    return loss / static_cast<double>(sequence_ * global_batch);
  }

  std::optional<double> evaluate(int, int, Backend&, const std::function<void()>&) override {
    return std::nullopt;
  }

 private:
  GptOptions options_;
  torch::Device device_;
  Gpt model_;
  std::int64_t sequence_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> make_fmnist_workload(const FmnistOptions& options,
                                                       torch::Device device) {
  auto train = data::load_mnist_split(options.data_dir, "train");
  if (!train) return train.error();
  auto test = data::load_mnist_split(options.data_dir, "t10k");
  if (!test) return test.error();
  std::unique_ptr<Workload> workload = std::make_unique<FmnistWorkload>(
      images_to_tensor(*train, options.train_limit), labels_to_tensor(*train, options.train_limit),
      images_to_tensor(*test, options.test_limit), labels_to_tensor(*test, options.test_limit),
      device);
  return workload;
}

std::unique_ptr<Workload> make_gpt_workload(const GptOptions& options, torch::Device device,
                                            torch::Dtype dtype) {
  return std::make_unique<GptWorkload>(options, device, dtype);
}

}  // namespace elastic::trainer
