// Process group set-up from the worker contract: rank 0 hosts the c10d TCPStore at
// MASTER_ADDR:MASTER_PORT, every rank joins it, then NCCL (CUDA tensors) or Gloo (CPU tensors).
//
// Errors (store unreachable, a rank missing past the timeout) come back as an Error naming the
// endpoint and the reason; LibTorch's exceptions do not escape.
#pragma once

#include <chrono>
#include <string>

#include <torch/torch.h>

#include "daemon/core/result.h"
#include "trainer/torch_compat.h"
#include "trainer/worker_env.h"

namespace elastic::trainer {

struct DistOptions {
  torch::Device device = torch::kCPU;
  // How long a collective or a store wait may take before it fails. Short values make a lost
  // peer visible quickly; the daemon stops stale workers anyway.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

struct Dist {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> backend;
  std::string backend_name;  // "gloo" or "nccl"
};

Result<Dist> init_dist(const WorkerEnv& env, const DistOptions& options);

// Makes every collective of `dist` that is pending, running or still to come fail now, on this
// rank and, through the connections this closes, on its peers: a survivor of a lost peer calls it
// before it leaves the group, so that no peer waits for it until a collective times out.
//  - Gloo (which has no abort of its own): the socket of every connection of the group is shut
//    down; collectives waiting on them throw gloo::IoException, here and on the peers.
//  - NCCL: the communicators are aborted (LibTorch 2.x ProcessGroupNCCL::abort(); 1.13 has no
//    such call and aborts them when the group is destroyed, which the caller does next).
// The group is unusable afterwards; destroy it. Never throws.
void abort_backend(Dist& dist);

// Pays the first-use costs of the backend that groups on `options.device` use, once per process,
// in a group of this process alone (over an in-memory store, one all-reduce, then shut down): NCCL
// initialises its library, probes the network and the topology and loads its kernels at the
// first communicator a process creates. A live joiner calls it before it tells its daemon it is
// ready, so the running ranks, which wait for that, do not wait for these costs in their first
// collective with it. Gloo has none: on CPU it does nothing (0 s). Returns the seconds it took;
// an Error (the group could not be formed or used) leaves nothing behind but costs nothing
// either: the real group pays the costs then.
Result<double> warm_up_backend(const DistOptions& options);

// Whether this build can run NCCL (a CUDA LibTorch with c10d NCCL compiled in).
bool nccl_compiled_in();

}  // namespace elastic::trainer
