// Workload: a model, its training data addressed by sample index, and its evaluation.
//
// The trainer asks for the loss of a list of sample indices (chosen by the ElasticSampler), so
// what a rank trains on depends only on the sampler, never on the rank's history.
//  - fmnist: the CNN on Fashion-MNIST read from Debian's dataset-fashion-mnist files; reports
//    test accuracy.
//  - gpt: a GPT-2-shaped decoder on synthetic token sequences (sample i is a pure function of
//    (seed, i)), for throughput.
// Errors while loading data are returned as Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "daemon/core/result.h"
#include "trainer/models.h"
#include "trainer/torch_compat.h"

namespace elastic::trainer {

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  virtual std::int64_t train_size() const = 0;
  virtual torch::nn::Module& module() = 0;
  // Sum of the per-sample losses of `indices` divided by `global_batch`, so that summing it over
  // ranks gives the mean loss of the global batch. `indices` is not empty.
  virtual torch::Tensor scaled_loss(const std::vector<std::int64_t>& indices,
                                    std::int64_t global_batch) = 0;
  // Test-set accuracy over all ranks, or nullopt when the workload has none. Collective.
  // `working`, if set, is called after each chunk of the test set (hang detection: a long
  // evaluation is progress, not a stuck rank).
  virtual std::optional<double> evaluate(int rank, int world, Backend& backend,
                                         const std::function<void()>& working = {}) = 0;
};

struct FmnistOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t train_limit = 0;  // >0: use only the first N training images (quick runs)
  std::int64_t test_limit = 0;   // >0: evaluate on the first N test images only
};

struct GptOptions {
  GptShape shape;
  std::int64_t sequence = 0;  // tokens per sample; 0 = shape.context
  std::int64_t train_size = 1 << 20;
  std::uint64_t data_seed = 1;
};

Result<std::unique_ptr<Workload>> make_fmnist_workload(const FmnistOptions& options,
                                                       torch::Device device);
std::unique_ptr<Workload> make_gpt_workload(const GptOptions& options, torch::Device device,
                                            torch::Dtype dtype);

}  // namespace elastic::trainer
