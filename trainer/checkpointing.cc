#include "trainer/checkpointing.h"

#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

namespace elastic::trainer {
namespace {

constexpr int kFormat = 1;
constexpr const char* kModelFile = "model.pt";
constexpr const char* kOptimizerFile = "optimizer.pt";
constexpr const char* kStateFile = "state.json";

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return std::move(out).str();
}

}  // namespace

Result<checkpoint::CheckpointRef> save_checkpoint(checkpoint::CheckpointStore& store,
                                                  const TrainState& state,
                                                  torch::nn::Module& module,
                                                  torch::optim::Optimizer& optimizer) {
  std::string model_bytes, optimizer_bytes;
  try {
    torch::serialize::OutputArchive model_archive;
    module.save(model_archive);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      model_archive.write("rng_cpu", generator.get_state());
    }
    model_bytes = archive_bytes(model_archive);
    torch::serialize::OutputArchive optimizer_archive;
    optimizer.save(optimizer_archive);
    optimizer_bytes = archive_bytes(optimizer_archive);
  } catch (const std::exception& e) {
    return Error{"cannot serialise the checkpoint of step " + std::to_string(state.step) + ": " +
                 e.what()};
  }
  nlohmann::json json = {{"format", kFormat},
                         {"workload", state.workload},
                         {"step", state.step},
                         {"epoch", state.position.epoch},
                         {"position", state.position.position},
                         {"seed", state.seed},
                         {"dataset_size", state.dataset_size},
                         {"world_size", state.world_size},
                         {"round", state.round}};
  auto writer = store.begin(state.step, state.round);
  if (!writer) return writer.error();
  for (auto [name, bytes] : {std::pair<const char*, const std::string*>{kModelFile, &model_bytes},
                             {kOptimizerFile, &optimizer_bytes}}) {
    if (auto s = writer->add(name, *bytes); !s) return s.error();
  }
  if (auto s = writer->add(kStateFile, json.dump(2) + "\n"); !s) return s.error();
  return writer->publish();
}

Result<TrainState> load_checkpoint(checkpoint::CheckpointStore& store, std::int64_t step,
                                   torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                   torch::Device device) {
  checkpoint::CheckpointRef ref{
      step, store.job_dir() + "/" + checkpoint::CheckpointStore::step_dir_name(step)};
  auto state_text = store.read(ref, kStateFile);
  if (!state_text) return state_text.error();
  TrainState state;
  try {
    auto json = nlohmann::json::parse(*state_text);
    if (json.at("format").get<int>() != kFormat) {
      return Error{ref.dir + "/" + kStateFile + ": unsupported checkpoint format " +
                   json.at("format").dump()};
    }
    state.workload = json.at("workload").get<std::string>();
    state.step = json.at("step").get<std::int64_t>();
    state.position.epoch = json.at("epoch").get<std::int64_t>();
    state.position.position = json.at("position").get<std::int64_t>();
    state.seed = json.at("seed").get<std::uint64_t>();
    state.dataset_size = json.at("dataset_size").get<std::int64_t>();
    state.world_size = json.at("world_size").get<int>();
    state.round = json.at("round").get<std::int64_t>();
  } catch (const std::exception& e) {
    return Error{ref.dir + "/" + kStateFile + ": malformed: " + e.what()};
  }
  auto model_bytes = store.read(ref, kModelFile);
  if (!model_bytes) return model_bytes.error();
  auto optimizer_bytes = store.read(ref, kOptimizerFile);
  if (!optimizer_bytes) return optimizer_bytes.error();
  try {
    torch::serialize::InputArchive model_archive;
    model_archive.load_from(model_bytes->data(), model_bytes->size(), device);
    module.load(model_archive);
    torch::Tensor rng;
    model_archive.read("rng_cpu", rng);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng.cpu());
    }
    torch::serialize::InputArchive optimizer_archive;
    optimizer_archive.load_from(optimizer_bytes->data(), optimizer_bytes->size(), device);
    optimizer.load(optimizer_archive);
  } catch (const std::exception& e) {
    return Error{ref.dir + ": cannot load the model or optimizer: " + e.what()};
  }
  return state;
}

}  // namespace elastic::trainer
