#include "trainer/checkpointing.h"

#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
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

// Copies `live` into `*host`, allocating a new host buffer only when there is none of its shape
// and type yet. Pinned on CUDA so the copy is an asynchronous DMA; the caller waits for it.
void copy_to_host(const torch::Tensor& live, torch::Tensor* host, std::int64_t* allocations,
                  bool* from_cuda) {
  if (!live.defined()) {
    *host = torch::Tensor();
    return;
  }
  if (!host->defined() || host->sizes() != live.sizes() || host->dtype() != live.dtype()) {
    *host = torch::empty(live.sizes(), torch::TensorOptions()
                                           .dtype(live.dtype())
                                           .device(torch::kCPU)
                                           .pinned_memory(live.is_cuda()));
    ++*allocations;
  }
  // Module::save() records requires_grad with each parameter: keep the archive identical.
  if (host->requires_grad() != live.requires_grad()) host->set_requires_grad(live.requires_grad());
  host->copy_(live.detach(), /*non_blocking=*/live.is_cuda());
  *from_cuda = *from_cuda || live.is_cuda();
}

}  // namespace

// The module's tree with host copies of its tensors, in Module::save()'s order and names.
struct StateSnapshot::ModuleCopy {
  std::vector<std::pair<std::string, torch::Tensor>> parameters, buffers;
  std::vector<std::pair<std::string, std::unique_ptr<ModuleCopy>>> children;

  void capture(const torch::nn::Module& module, std::int64_t* allocations, bool* from_cuda) {
    auto copy_all = [&](const torch::OrderedDict<std::string, torch::Tensor>& live,
                        std::vector<std::pair<std::string, torch::Tensor>>* host) {
      host->resize(live.size());
      for (std::size_t i = 0; i < live.size(); ++i) {
        (*host)[i].first = live[i].key();
        copy_to_host(live[i].value(), &(*host)[i].second, allocations, from_cuda);
      }
    };
    copy_all(module.named_parameters(/*recurse=*/false), &parameters);
    copy_all(module.named_buffers(/*recurse=*/false), &buffers);
    std::size_t n = 0;
    for (const auto& child : module.named_children()) {
      if (!child.value()->is_serializable()) continue;
      if (n == children.size()) children.emplace_back(child.key(), std::make_unique<ModuleCopy>());
      children[n].first = child.key();
      children[n].second->capture(*child.value(), allocations, from_cuda);
      ++n;
    }
    children.resize(n);
  }

  void save(torch::serialize::OutputArchive& archive) const {
    for (const auto& [name, tensor] : parameters) archive.write(name, tensor);
    for (const auto& [name, tensor] : buffers) archive.write(name, tensor, /*is_buffer=*/true);
    for (const auto& [name, child] : children) {
      torch::serialize::OutputArchive child_archive(archive.compilation_unit());
      child->save(child_archive);
      archive.write(name, child_archive);
    }
  }
};

// A shadow optimizer of the live one's kind: the same parameter groups (the live parameters
// only name the state entries; save() never reads their data) and options, and state entries
// whose tensors are host copies. Its save() is LibTorch's own, so the format cannot drift.
struct StateSnapshot::OptimizerCopy {
  std::unique_ptr<torch::optim::Optimizer> shadow;
  std::string serialised;  // the fallback for other optimizers

  template <typename Options>
  static std::unique_ptr<torch::optim::Optimizer> make_shadow(const torch::optim::Optimizer& live) {
    const auto& first = static_cast<const Options&>(live.param_groups().at(0).options());
    if constexpr (std::is_same_v<Options, torch::optim::AdamOptions>) {
      return std::make_unique<torch::optim::Adam>(live.param_groups(), first);
    } else {
      return std::make_unique<torch::optim::SGD>(live.param_groups(), first);
    }
  }

  // Copies the state of every live entry of type `State` into the shadow's entry of the same
  // key; `tensors` lists the state's tensor fields.
  template <typename State, typename Tensors>
  void copy_state(const torch::optim::Optimizer& live, Tensors tensors, std::int64_t* allocations,
                  bool* from_cuda) {
    auto& state = shadow->state();
    for (auto it = state.begin(); it != state.end();) {
      it = live.state().count(it->first) == 0 ? state.erase(it) : std::next(it);
    }
    for (const auto& [key, live_state] : live.state()) {
      const auto& from = static_cast<const State&>(*live_state);
      auto& slot = state[key];
      if (!slot) slot = std::make_unique<State>();
      auto& to = static_cast<State&>(*slot);
      tensors(from, to, [&](const torch::Tensor& t, torch::Tensor* host) {
        copy_to_host(t, host, allocations, from_cuda);
      });
    }
  }

  void capture(const torch::optim::Optimizer& live, std::int64_t* allocations, bool* from_cuda) {
    using torch::optim::AdamParamState;
    using torch::optim::SGDParamState;
    const bool adam = dynamic_cast<const torch::optim::Adam*>(&live) != nullptr;
    const bool sgd = dynamic_cast<const torch::optim::SGD*>(&live) != nullptr;
    if (!adam && !sgd) {
      torch::serialize::OutputArchive archive;
      live.save(archive);
      serialised = archive_bytes(archive);
      return;
    }
    if (!shadow || shadow->param_groups().size() != live.param_groups().size()) {
      shadow = adam ? make_shadow<torch::optim::AdamOptions>(live)
                    : make_shadow<torch::optim::SGDOptions>(live);
    }
    // Options may change between checkpoints (a learning-rate schedule): copy them every time.
    for (std::size_t i = 0; i < live.param_groups().size(); ++i) {
      shadow->param_groups()[i].params() = live.param_groups()[i].params();
      shadow->param_groups()[i].set_options(live.param_groups()[i].options().clone());
    }
    if (adam) {
      copy_state<AdamParamState>(
          live,
          [](const AdamParamState& from, AdamParamState& to, auto copy) {
            to.step(from.step());
            copy(from.exp_avg(), &to.exp_avg());
            copy(from.exp_avg_sq(), &to.exp_avg_sq());
            copy(from.max_exp_avg_sq(), &to.max_exp_avg_sq());
          },
          allocations, from_cuda);
    } else {
      copy_state<SGDParamState>(
          live,
          [](const SGDParamState& from, SGDParamState& to, auto copy) {
            copy(from.momentum_buffer(), &to.momentum_buffer());
          },
          allocations, from_cuda);
    }
  }

  std::string bytes() const {
    if (!shadow) return serialised;
    torch::serialize::OutputArchive archive;
    shadow->save(archive);
    return archive_bytes(archive);
  }
};

StateSnapshot::StateSnapshot()
    : module_(std::make_unique<ModuleCopy>()), optimizer_(std::make_unique<OptimizerCopy>()) {}
StateSnapshot::~StateSnapshot() = default;

Status StateSnapshot::capture(const TrainState& state, const torch::nn::Module& module,
                              const torch::optim::Optimizer& optimizer) {
  try {
    torch::NoGradGuard no_grad;
    bool from_cuda = false;
    module_->capture(module, &allocations_, &from_cuda);
    optimizer_->capture(optimizer, &allocations_, &from_cuda);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_ = generator.get_state();
    }
    // The copies were queued behind the step on the current stream: once they are done the
    // host buffers hold exactly this step's state, and the GPU may move on.
    if (from_cuda) torch::cuda::synchronize();
  } catch (const std::exception& e) {
    return Error{"cannot copy the state of step " + std::to_string(state.step) +
                 " for its checkpoint: " + e.what()};
  }
  state_ = state;
  bytes_ = 0;
  auto count = [&](const torch::Tensor& t) {
    if (t.defined()) bytes_ += static_cast<std::int64_t>(t.nbytes());
  };
  std::function<void(const ModuleCopy&)> count_module = [&](const ModuleCopy& m) {
    for (const auto& entry : m.parameters) count(entry.second);
    for (const auto& entry : m.buffers) count(entry.second);
    for (const auto& entry : m.children) count_module(*entry.second);
  };
  count_module(*module_);
  if (optimizer_->shadow) {
    for (const auto& [key, entry] : optimizer_->shadow->state()) {
      if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(entry.get())) {
        for (const auto& t : {adam->exp_avg(), adam->exp_avg_sq(), adam->max_exp_avg_sq()})
          count(t);
      } else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(entry.get())) {
        count(sgd->momentum_buffer());
      }
    }
  }
  return ok_status();
}

Result<checkpoint::CheckpointRef> StateSnapshot::write(
    checkpoint::CheckpointStore& store, const std::function<Status()>& still_current) const {
  const TrainState& state = state_;
  std::string model_bytes, optimizer_bytes;
  try {
    torch::serialize::OutputArchive model_archive;
    module_->save(model_archive);
    model_archive.write("rng_cpu", rng_);
    model_bytes = archive_bytes(model_archive);
    optimizer_bytes = optimizer_->bytes();
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
  return writer->publish(still_current);
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
