// What the trainer puts in a checkpoint and how it gets it back, over the CheckpointStore
// protocol (daemon/checkpoint/checkpoint_store.h).
//
// Rank 0 writes; the model is replicated, so one copy is the whole state. A checkpoint dir holds
//   model.pt      the module's parameters and buffers (torch archive) + the CPU RNG state
//   optimizer.pt  the optimizer state (torch archive)
//   state.json    step, sampler position (epoch, position), seed, world size and round at save
// Every rank loads the same step dir (named by rank 0, so all ranks agree even if NFS shows an
// older LATEST to some). Errors name the checkpoint dir and the file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "daemon/checkpoint/checkpoint_store.h"
#include "daemon/core/result.h"
#include "trainer/data/sampler.h"

namespace elastic::trainer {

struct TrainState {
  std::int64_t step = 0;
  data::SamplerPosition position;
  std::uint64_t seed = 0;
  std::int64_t dataset_size = 0;
  std::string workload;
  int world_size = 0;      // at save time; informational
  std::int64_t round = 0;  // at save time; informational
};

Result<checkpoint::CheckpointRef> save_checkpoint(checkpoint::CheckpointStore& store,
                                                  const TrainState& state,
                                                  torch::nn::Module& module,
                                                  torch::optim::Optimizer& optimizer);

// Loads the checkpoint of `step` into the module and optimizer (tensors land on `device`).
// The state must belong to the same workload and data set size.
Result<TrainState> load_checkpoint(checkpoint::CheckpointStore& store, std::int64_t step,
                                   torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                   torch::Device device);

}  // namespace elastic::trainer
