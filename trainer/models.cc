#include "trainer/models.h"

#include <cmath>

#include "trainer/torch_compat.h"

namespace elastic::trainer {

FashionCnnImpl::FashionCnnImpl() {
  conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
  fc1_ = register_module("fc1", torch::nn::Linear(64 * 5 * 5, 128));
  fc2_ = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor FashionCnnImpl::forward(torch::Tensor images) {
  auto x = torch::max_pool2d(torch::relu(conv1_(images)), 2);  // 26 -> 13
  x = torch::max_pool2d(torch::relu(conv2_(x)), 2);            // 11 -> 5
  x = torch::relu(fc1_(x.flatten(1)));
  return fc2_(x);
}

namespace {

// torch::nn::Linear's forward runs a matmul and then a separate broadcast add of the bias for
// inputs of more than two dimensions; ATen's linear folds the bias into the GEMM (cuBLASLt
// epilogue), as Python's nn.Linear does. On GPT-2 small that separate add cost 1.8 ms of a
// 40 ms step (H200, bench/gpu/RESULTS in bench/RESULTS.md).
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

}  // namespace

GptBlockImpl::GptBlockImpl(std::int64_t width, std::int64_t heads) : heads_(heads) {
  TORCH_CHECK(width % heads == 0, "GPT width must be a multiple of the head count");
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  qkv_ = register_module("qkv", torch::nn::Linear(width, 3 * width));
  proj_ = register_module("proj", torch::nn::Linear(width, width));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  fc_ = register_module("fc", torch::nn::Linear(width, 4 * width));
  fc_out_ = register_module("fc_out", torch::nn::Linear(4 * width, width));
}

torch::Tensor GptBlockImpl::forward(torch::Tensor x) {
  const auto batch = x.size(0), time = x.size(1), width = x.size(2);
  const auto head_width = width / heads_;
  auto qkv =
      linear(qkv_, ln1_(x)).view({batch, time, 3, heads_, head_width}).permute({2, 0, 3, 1, 4});
  auto attended = causal_attention(qkv[0], qkv[1], qkv[2]);  // [B,H,T,hw]
  x = x + linear(proj_, attended.transpose(1, 2).reshape({batch, time, width}));
  x = x + linear(fc_out_, torch::gelu(linear(fc_, ln2_(x))));
  return x;
}

GptImpl::GptImpl(const GptShape& shape) : shape_(shape) {
  token_embedding_ = register_module("wte", torch::nn::Embedding(shape.vocab, shape.width));
  position_embedding_ = register_module("wpe", torch::nn::Embedding(shape.context, shape.width));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < shape.layers; ++i)
    blocks_->push_back(GptBlock(shape.width, shape.heads));
  ln_final_ =
      register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({shape.width})));
  // GPT-2's initialisation: N(0, 0.02) everywhere, zero biases.
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    if (p.key().find("ln") != std::string::npos) continue;
    if (p.key().find("bias") != std::string::npos) {
      p.value().zero_();
    } else {
      p.value().normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(torch::Tensor tokens) {
  const auto time = tokens.size(1);
  auto positions =
      torch::arange(time, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  auto x = token_embedding_(tokens) + position_embedding_(positions).unsqueeze(0);
  for (auto& block : *blocks_) x = block->as<GptBlock>()->forward(x);
  // Tied head: logits from the token embedding matrix, as GPT-2 does.
  return torch::matmul(ln_final_(x), token_embedding_->weight.t());
}

}  // namespace elastic::trainer
