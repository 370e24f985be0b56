// Warm Python interpreters (JobSpec::warm): what a standby runs and what it is told.
//
// A warm job keeps, per slot it ran on, one started interpreter (a "standby"): the job's own
// interpreter and options, started as the job's user with the job's environment, working
// directory and the slot's bindings, running kWarmBootstrap (python -c). The bootstrap imports
// torch, creates the CUDA context on the slot's GPU when one is visible (nothing forks after
// that) and takes one optimizer step on a zero tensor (torch defers the import of torch._dynamo
// and more to the first optimizer: about 5 s on a GPU host); on a GPU it also runs the first
// matmul of each float type forward and backward (cuBLAS handles) and an all-reduce in a
// one-rank NCCL group on a private store, destroyed again (NCCL's once-per-process start: its
// device code, NVML, the network probe); then it blocks reading the hand-off pipe
// (spawner.h, fd 3). When the next round starts a rank on that slot, the job supervisor writes the
// hand-off (encode_handoff) instead of starting a process: the bootstrap replaces its environment
// with the rank's, changes to the working directory, sets sys.argv and sys.path[0] as `python
// SCRIPT` or `python -m MODULE` would, and runs the unmodified script as __main__ (runpy). From
// then on the standby is that rank's worker: same pid, same log handling, same stop and exit
// semantics; it exits with the script's status. A standby whose pipe is closed without a hand-off
// exits 0.
//
// What a warm start does not redo: the interpreter start, `import torch`, CUDA's context, the
// first optimizer's imports, cuBLAS's and NCCL's first use (together about 10 s on a GPU host
// with PyTorch 2.11). What it cannot change afterwards: anything Python or a library read at
// start-up from the environment (PYTHONPATH and other PYTHON* variables,
// PYTORCH_CUDA_ALLOC_CONF, CUDA_VISIBLE_DEVICES, the NCCL_* variables NCCL reads once per
// process): those come from the round in which the standby was started (a value with a {round}
// placeholder keeps that round's number).
//
// Pure functions on values; the job supervisor owns the standbys' lifetimes.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/rendezvous/python_command.h"
#include "daemon/spawner/spawner.h"

namespace elastic::node {

// The Python program a standby runs (see above).
extern const std::string_view kWarmBootstrap;

// The hand-off for a worker that would have run `python` in `cwd` with the COMPLETE
// environment `env`: "elastic-warm-1", then module|script, target, cwd, the argument count,
// the arguments, the variable count and NAME=VALUE pairs, joined by NUL bytes. Strings with a
// NUL byte (which exec could not pass either) are an Error.
Result<std::string> encode_handoff(const rendezvous::PythonCommand& python,
                                   const std::map<std::string, std::string>& env,
                                   const std::string& cwd);

// The standby for the slot that `worker` (a warm job's worker spec) runs on: the same user,
// environment, working directory and bindings; argv = the command's interpreter and options,
// then -c kWarmBootstrap; a hand-off pipe; the given label and log. An Error when the command
// is not one python_command.h accepts.
Result<spawner::WorkerSpec> standby_spec(spawner::WorkerSpec worker, std::string label,
                                         std::string log_path);

}  // namespace elastic::node
