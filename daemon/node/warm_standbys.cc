#include "daemon/node/warm_standbys.h"

#include <utility>

namespace elastic::node {

// Kept small and dependency-free: it runs as the job's user before the job's code, so it
// imports only the standard library and torch, and never lets a failed preload stop the
// script (which then imports torch itself and reports its own error).
const std::string_view kWarmBootstrap = R"PY(import os, sys
def _elastic_warm_gpu(torch):
    # What every new CUDA process pays at its first use, paid here instead: the cuBLAS handles
    # and workspaces (the first matmul of each type, forward and backward) and NCCL's once-per-
    # process start (its library and device code, NVML, the network probe), in a group of one
    # on a private store, destroyed again: the script's own groups and the default group are
    # untouched.
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        a = torch.ones(64, 64, device="cuda", dtype=dtype, requires_grad=True)
        (a @ a).sum().backward()
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_nccl_available():
            group = dist.ProcessGroupNCCL(dist.HashStore(), 0, 1, dist.ProcessGroupNCCL.Options())
            one = torch.ones(1, device="cuda")
            group.allreduce([one]).wait()
            torch.cuda.synchronize()
            getattr(group, "shutdown", getattr(group, "abort", lambda: None))()
            del group
    except Exception as e:
        print("[elastic warm] NCCL warm-up skipped (%r)" % (e,), file=sys.stderr, flush=True)
    torch.cuda.synchronize()
def _elastic_warm():
    import runpy, time
    started = time.monotonic()
    try:
        import torch
        device = "cpu"
        if os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1") and torch.cuda.is_available():
            device = "cuda"
        # One optimizer step on a zero tensor: the CUDA context, and the imports torch defers to
        # the first optimizer (torch._dynamo and friends, seconds); no random numbers are drawn.
        p = torch.zeros(1, device=device, requires_grad=True)
        p.grad = torch.zeros_like(p)
        torch.optim.AdamW([p]).step()
        del p
        if device == "cuda":
            _elastic_warm_gpu(torch)
            torch.cuda.empty_cache()
        print("[elastic warm] ready in %.1f s: torch %s imported, %s warmed up; waiting for a round"
              % (time.monotonic() - started, torch.__version__, device), file=sys.stderr, flush=True)
    except BaseException as e:
        print("[elastic warm] preloading torch failed (%r); the script imports it itself" % (e,),
              file=sys.stderr, flush=True)
    chunks = []
    while True:
        chunk = os.read(3, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(3)
    if not chunks:
        sys.exit(0)
    f = b"".join(chunks).split(b"\0")
    if f[0] != b"elastic-warm-1":
        sys.exit("[elastic warm] unknown hand-off %r" % (f[0],))
    kind, target, cwd = f[1], os.fsdecode(f[2]), os.fsdecode(f[3])
    nargs = int(f[4])
    args = [os.fsdecode(a) for a in f[5:5 + nargs]]
    nenv = int(f[5 + nargs])
    env = {}
    for pair in f[6 + nargs:6 + nargs + nenv]:
        name, _, value = pair.partition(b"=")
        env[os.fsdecode(name)] = os.fsdecode(value)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    first = os.getcwd() if kind == b"module" else os.path.dirname(os.path.realpath(target))
    if getattr(sys.flags, "safe_path", False):
        if sys.path and sys.path[0] == "":
            del sys.path[0]
    elif sys.path and sys.path[0] == "":
        sys.path[0] = first
    else:
        sys.path.insert(0, first)
    sys.argv = [target] + args
    if kind == b"module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")
_elastic_warm()
)PY";

Result<std::string> encode_handoff(const rendezvous::PythonCommand& python,
                                   const std::map<std::string, std::string>& env,
                                   const std::string& cwd) {
  std::string out = "elastic-warm-1";
  bool nul = false;
  auto add = [&](std::string_view field) {
    nul = nul || field.find('\0') != std::string_view::npos;
    out.push_back('\0');
    out.append(field);
  };
  add(python.module ? "module" : "script");
  add(python.target);
  add(cwd);
  add(std::to_string(python.args.size()));
  for (const std::string& arg : python.args) add(arg);
  add(std::to_string(env.size()));
  for (const auto& [name, value] : env) add(name + "=" + value);
  if (nul) return Error{"an argument, variable or path holds a NUL byte"};
  return out;
}

Result<spawner::WorkerSpec> standby_spec(spawner::WorkerSpec worker, std::string label,
                                         std::string log_path) {
  Result<rendezvous::PythonCommand> python = rendezvous::parse_python_command(worker.argv);
  if (!python.ok()) return python.error();
  worker.argv = std::move(python->interpreter);
  worker.argv.emplace_back("-c");
  worker.argv.emplace_back(kWarmBootstrap);
  worker.label = std::move(label);
  worker.log_path = std::move(log_path);
  worker.handoff = true;
  return worker;
}

}  // namespace elastic::node
