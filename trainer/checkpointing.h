// What the trainer puts in a checkpoint and how it gets it back, over the CheckpointStore
// protocol (daemon/checkpoint/checkpoint_store.h).
//
// Rank 0 writes; the model is replicated, so one copy is the whole state. A checkpoint dir holds
//   model.pt      the module's parameters and buffers (torch archive) + the CPU RNG state
//   optimizer.pt  the optimizer state (torch archive)
//   state.json    step, sampler position (epoch, position), seed, world size and round at save
// Every rank loads the same step dir (named by rank 0, so all ranks agree even if NFS shows an
// older LATEST to some). Errors name the checkpoint dir and the file.
//
// Saving is two halves so that only the first holds up training: StateSnapshot::capture()
// copies the state into host memory at a step boundary (the training thread), write()
// serialises and publishes that copy (any thread; trainer/async_checkpointer.h runs it on a
// thread of its own).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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

// StateSnapshot: rank 0's copy of everything a checkpoint holds, in host memory.
//
// capture() copies the module's parameters and buffers, the optimizer state, the CPU RNG state
// and `state`. The host buffers are allocated by the first capture and reused by every later one
// (a buffer is replaced only when its tensor's shape or type changed); on CUDA they are pinned
// and filled by asynchronous copies that capture() waits for, so the copy runs at the speed of
// the bus. write() then produces exactly the files save would have written from the live
// objects: the model archive mirrors Module::save() (the trainer's modules do not override it)
// and the optimizer archive is saved by a shadow optimizer of the same kind whose state tensors
// are the host copies. Adam (FusedAdam included) and SGD state is copied; any other optimizer is
// serialised during capture() instead (correct, just not off the training thread).
//
// Thread safety: capture() and write() must not overlap (the caller serialises them: one write
// in flight, and capture() only while none is); write() touches none of the live objects, so
// training may go on meanwhile. Errors: both return an Error naming the step and what failed.
class StateSnapshot {
 public:
  StateSnapshot();
  ~StateSnapshot();
  StateSnapshot(const StateSnapshot&) = delete;
  StateSnapshot& operator=(const StateSnapshot&) = delete;

  Status capture(const TrainState& state, const torch::nn::Module& module,
                 const torch::optim::Optimizer& optimizer);
  // Publishes the captured state as the checkpoint of its step, asking `still_current` right
  // before the rename (CheckpointWriter::publish()).
  Result<checkpoint::CheckpointRef> write(checkpoint::CheckpointStore& store,
                                          const std::function<Status()>& still_current) const;

  const TrainState& state() const { return state_; }
  // Host buffers allocated so far, over every capture (constant once sized), and their bytes.
  std::int64_t allocations() const { return allocations_; }
  std::int64_t bytes() const { return bytes_; }

 private:
  struct ModuleCopy;
  struct OptimizerCopy;

  TrainState state_;
  std::unique_ptr<ModuleCopy> module_;
  std::unique_ptr<OptimizerCopy> optimizer_;
  torch::Tensor rng_;
  std::int64_t allocations_ = 0;
  std::int64_t bytes_ = 0;
};

// Loads the checkpoint of `step` into the module and optimizer (tensors land on `device`).
// The state must belong to the same workload and data set size.
Result<TrainState> load_checkpoint(checkpoint::CheckpointStore& store, std::int64_t step,
                                   torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                   torch::Device device);

}  // namespace elastic::trainer
