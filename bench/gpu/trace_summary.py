#!/usr/bin/env python3
"""Summarises a Kineto Chrome trace (elastic-trainer --profile, or torch.profiler's export of
bench/gpu/gpt_ddp.py --profile) of N training steps: per step, the GPU span, how much of it the
GPU was busy (union of kernels, memcpys and memsets on all streams), the idle rest, NCCL kernel
time and how much of it overlapped compute kernels, the number of kernels launched, the host
time spent blocked in CUDA synchronisation calls, and the kernel time by category and by name.

Usage: trace_summary.py TRACE.json[.gz] --steps N [--label TEXT] [--top 10]
Prints a short text block and one JSON line (event "trace_summary")."""
import argparse
import gzip
import json
import re
from collections import defaultdict

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
BLOCKING = re.compile(r"cuda(StreamSynchronize|DeviceSynchronize|EventSynchronize|Memcpy$|MemcpyAsync)")
CATEGORIES = [
    ("nccl", re.compile(r"nccl", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|sm90_|sm80_", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|efficient_attention", re.I)),
    ("optimizer_fused", re.compile(r"fused_adam|FusedAdam|adam", re.I)),
    ("foreach", re.compile(r"multi_tensor_apply", re.I)),
    ("layernorm", re.compile(r"layer_norm|LayerNorm", re.I)),
    ("loss_softmax", re.compile(r"softmax|nll_loss|cross_entropy", re.I)),
    ("reduce", re.compile(r"reduce_kernel|Reduce", re.I)),
    ("copy_cast", re.compile(r"copy|cast|direct_copy", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|fill", re.I)),
]


def category(name):
    for cat, rx in CATEGORIES:
        if rx.search(name):
            return cat
    return "other"


def union(intervals):
    total, end = 0.0, None
    start = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def intersection(a, b):
    a, b = merged(a), merged(b)
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    gpu, nccl, compute = [], [], []
    by_cat, by_name = defaultdict(float), defaultdict(float)
    kernels = 0
    launches = 0
    blocked = 0.0
    for ev in events:
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        cat = ev.get("cat", "")
        name = ev.get("name", "")
        ts, dur = float(ev["ts"]), float(ev["dur"])
        if cat in GPU_CATS:
            gpu.append((ts, ts + dur))
            if cat == "kernel":
                kernels += 1
                c = category(name)
                by_cat[c] += dur
                by_name[name[:90]] += dur
                (nccl if c == "nccl" else compute).append((ts, ts + dur))
            else:
                by_cat[cat] += dur
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            if "Launch" in name:
                launches += 1
            if BLOCKING.search(name):
                blocked += dur
    if not gpu:
        print(json.dumps({"event": "trace_summary", "label": a.label, "error": "no GPU events"}))
        return
    n = a.steps
    span = max(e for _, e in gpu) - min(s for s, _ in gpu)
    busy = union(gpu)
    out = {
        "event": "trace_summary", "label": a.label, "steps": n,
        "gpu_span_ms_per_step": span / n / 1000, "gpu_busy_ms_per_step": busy / n / 1000,
        "gpu_idle_ms_per_step": (span - busy) / n / 1000,
        "compute_busy_ms_per_step": union(compute) / n / 1000,
        "nccl_ms_per_step": union(nccl) / n / 1000,
        "nccl_overlapped_ms_per_step": intersection(nccl, compute) / n / 1000,
        "kernels_per_step": kernels / n, "launches_per_step": launches / n,
        "host_blocked_ms_per_step": blocked / n / 1000,
        "by_category_ms_per_step": {k: round(v / n / 1000, 3) for k, v in
                                    sorted(by_cat.items(), key=lambda kv: -kv[1])},
    }
    print(f"== {a.label or a.trace}: per step (of {n})")
    for k in ("gpu_span_ms_per_step", "gpu_busy_ms_per_step", "gpu_idle_ms_per_step",
              "compute_busy_ms_per_step", "nccl_ms_per_step", "nccl_overlapped_ms_per_step",
              "kernels_per_step", "launches_per_step", "host_blocked_ms_per_step"):
        print(f"  {k:30s} {out[k]:9.2f}")
    print("  by category (ms):", ", ".join(f"{k} {v}" for k, v in out["by_category_ms_per_step"].items()))
    for name, dur in sorted(by_name.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"  {dur / n / 1000:7.3f} ms  {name}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
