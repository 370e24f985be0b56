// FusedAdam: torch::optim::Adam whose step runs as one multi-tensor CUDA kernel (ATen's
// _fused_adam_, what PyTorch's `Adam(fused=True)` calls) instead of LibTorch's loop of about
// seven kernels per parameter.
//
// Why: GPT-2 small has 148 parameter tensors, so the loop launches ~1,000 small kernels per
// step; on an H100 the host cannot launch them as fast as the GPU runs them, and the GPU idles.
//
// The state stays Adam's own (AdamParamState: exp_avg, exp_avg_sq, integer step), so the
// checkpoint format, save() and load() are unchanged and a checkpoint written by either path
// resumes in the other. The fused path is taken when every parameter with a gradient is a dense
// CUDA tensor of one device and dtype and amsgrad is off; otherwise (CPU, Gloo CI builds) the
// step is Adam::step(), bit for bit. The fused kernel computes in float32 and rounds once, so on
// bf16 parameters its results differ slightly from the loop's (which rounds after every op).
// Thread safety: as torch::optim::Adam (none; one training thread).
#pragma once

#include <vector>

#include <torch/torch.h>

namespace elastic::trainer {

class FusedAdam : public torch::optim::Adam {
 public:
  FusedAdam(std::vector<torch::Tensor> parameters, torch::optim::AdamOptions options, bool fused);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // Whether the last step() ran the fused kernel.
  bool last_step_fused() const { return last_step_fused_; }

 private:
  bool fused_step();

  bool fused_;
  bool last_step_fused_ = false;
};

}  // namespace elastic::trainer
