#include "trainer/fused_adam.h"

#include <map>
#include <optional>

#include "trainer/torch_compat.h"

namespace elastic::trainer {

FusedAdam::FusedAdam(std::vector<torch::Tensor> parameters, torch::optim::AdamOptions options,
                     bool fused)
    : torch::optim::Adam(std::move(parameters), options), fused_(fused) {}

torch::Tensor FusedAdam::step(LossClosure closure) {
  last_step_fused_ = false;
  if (fused_ && closure == nullptr && fused_step()) {
    last_step_fused_ = true;
    return {};
  }
  return torch::optim::Adam::step(std::move(closure));
}

bool FusedAdam::fused_step() {
  torch::NoGradGuard no_grad;
  // Check first, change nothing until the whole step is known to be fusable.
  std::optional<torch::Device> device;
  std::optional<caffe2::TypeMeta> dtype;
  for (const auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (options.amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!p.is_cuda() || p.is_sparse() || p.grad().is_sparse() || p.grad().dtype() != p.dtype() ||
          p.grad().device() != p.device())
        return false;
      if (!device) {
        device = p.device();
        dtype = p.dtype();
      }
      if (p.device() != *device || p.dtype() != *dtype) return false;
    }
  }
  if (!device) return false;

  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    // The kernel reads one float step count per parameter; parameters at the same count share
    // one device scalar (normally all of them: one tiny fill per step).
    std::map<std::int64_t, torch::Tensor> step_tensors;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto key = optimizer_state_key(p);
      auto found = state_.find(key);
      if (found == state_.end()) {
        // As Adam::step() initialises it, so either path can continue the other's state.
        auto fresh = std::make_unique<torch::optim::AdamParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamParamState&>(*found->second);
      state.step(state.step() + 1);
      auto& count = step_tensors[state.step()];
      if (!count.defined()) {
        count = torch::full({}, static_cast<double>(state.step()),
                            torch::TensorOptions().dtype(torch::kFloat).device(*device));
      }
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      steps.push_back(count);
    }
    if (params.empty()) continue;
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                     options.lr(), std::get<0>(options.betas()), std::get<1>(options.betas()),
                     options.weight_decay(), options.eps(), /*amsgrad=*/false,
                     /*maximize=*/false);
  }
  return true;
}

}  // namespace elastic::trainer
