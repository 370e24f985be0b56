// The trainer's networks: a small CNN for Fashion-MNIST and a GPT-2-shaped decoder for
// throughput. Plain LibTorch modules; nothing here knows about ranks or checkpoints.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace elastic::trainer {

// Two conv+pool layers and two fully connected ones: ~85% test accuracy on Fashion-MNIST after
// one epoch, fast enough for CPU CI.
class FashionCnnImpl : public torch::nn::Module {
 public:
  FashionCnnImpl();
  torch::Tensor forward(torch::Tensor images);  // [B,1,28,28] -> logits [B,10]

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(FashionCnn);

struct GptShape {
  std::int64_t vocab = 50257;  // GPT-2 small by default
  std::int64_t context = 1024;
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  std::int64_t width = 768;
};

class GptBlockImpl : public torch::nn::Module {
 public:
  GptBlockImpl(std::int64_t width, std::int64_t heads);
  torch::Tensor forward(torch::Tensor x);

 private:
  std::int64_t heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, fc_out_{nullptr};
};
TORCH_MODULE(GptBlock);

// A GPT-2-shaped decoder (pre-norm blocks, causal self-attention, GELU MLP, tied output head).
class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptShape& shape);
  torch::Tensor forward(torch::Tensor tokens);  // [B,T] int64 -> logits [B,T,vocab]
  const GptShape& shape() const { return shape_; }

 private:
  GptShape shape_;
  torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_final_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace elastic::trainer
