// The differences between Debian's LibTorch 1.13 (CI, CPU) and PyTorch 2.x (GPU hosts) that the
// trainer meets, in one place. Everything else in trainer/ is written against the common API.
//
// - Process groups: in 1.13 ProcessGroupGloo/NCCL derive from c10d::ProcessGroup; in 2.x from
//   c10d::Backend. Hold them as `c10::intrusive_ptr<elastic::trainer::Backend>`.
// - TCPStore: 2.x adds libuv (on by default); we keep the classic server for identical
//   behaviour on both.
// - Shutdown: 2.x process groups (NCCL above all) want shutdown() before exit; 1.13 has none.
// - Abort (live re-formation): 2.x ProcessGroupNCCL::abort() aborts the communicators at once
//   (2.0-2.5 take an optional reason and may return bool; later ones take none; both compile
//   as abort()); 1.13 has no abort of the group: its destructor aborts the communicators.
//   Gloo has no abort in either; dist.cc closes the group's connections (its contexts_ are
//   protected members in both).
// - Optimizer state: 1.13 keys it by the parameter's TensorImpl address as a string, 2.x by the
//   address itself.
// - Collective timing: 2.x works report their CUDA-event duration (getDuration(), with
//   TORCH_NCCL_ENABLE_TIMING=1); 1.13 has no such call.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string>

namespace elastic::trainer {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

inline void configure_store_options(c10d::TCPStoreOptions& options) {
#if TORCH_VERSION_MAJOR >= 2
  options.useLibUV = false;
#else
  (void)options;
#endif
}

inline void shutdown_backend(Backend& backend) {
#if TORCH_VERSION_MAJOR >= 2
  backend.shutdown();
#else
  (void)backend;
#endif
}

// Aborts an NCCL group's communicators now where LibTorch can (a template so that this header
// needs no NCCL header).
template <typename NcclGroup>
inline void abort_nccl(NcclGroup& group) {
#if TORCH_VERSION_MAJOR >= 2
  group.abort();
#else
  (void)group;  // ~ProcessGroupNCCL aborts them when the caller destroys the group
#endif
}

#if TORCH_VERSION_MAJOR >= 2
inline void* optimizer_state_key(const at::Tensor& parameter) {
  return parameter.unsafeGetTensorImpl();
}
#else
inline std::string optimizer_state_key(const at::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}
#endif

// Milliseconds the collective took on the GPU, or a negative value where that is unknown (no
// timing enabled, a backend without it, LibTorch 1.13). The work must have completed.
inline float collective_milliseconds(c10d::Work& work) {
#if TORCH_VERSION_MAJOR >= 2
  try {
    return work.getDuration();
  } catch (const std::exception&) {
    return -1;
  }
#else
  (void)work;
  return -1;
#endif
}

}  // namespace elastic::trainer

#include <cmath>
#include <limits>

#include <torch/torch.h>

namespace elastic::trainer {

// Causal scaled dot-product attention over [B,H,T,hw] tensors. 2.x has a fused kernel (flash
// attention on GPUs); 1.13 gets the textbook form.
inline torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true);
#else
  const auto time = q.size(-2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  auto mask =
      torch::ones({time, time}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
          .triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
#endif
}

}  // namespace elastic::trainer
