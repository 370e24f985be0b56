#!/usr/bin/env python3
"""Plain NCCL all-reduce bus bandwidth through torch.distributed (one process a GPU, under
torchrun --standalone), for the sizes the trainer's buckets have: prints one JSON line per size
(rank 0). busbw = bytes * 2(n-1)/n / time, NCCL's definition (nccl-tests PERFORMANCE.md); the
time is the median of --iters all-reduces, each timed with CUDA events after --warmup ones.
Usage: torchrun --standalone --nproc-per-node N allreduce.py --sizes-mib 1 25 237 1024"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", type=float, nargs="+", default=[1, 25, 1024])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", device_id=device)
    dtype = getattr(torch, a.dtype)
    for mib in a.sizes_mib:
        elements = int(mib * (1 << 20)) // torch.tensor([], dtype=dtype).element_size()
        x = torch.randn(elements, device=device).to(dtype)
        for _ in range(a.warmup):
            dist.all_reduce(x)
        times = []
        for _ in range(a.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        t = statistics.median(times)
        nbytes = elements * x.element_size()
        if rank == 0:
            print(json.dumps({"event": "allreduce", "world_size": world, "dtype": a.dtype,
                              "bytes": nbytes, "median_s": t,
                              "busbw_gbs": nbytes * 2 * (world - 1) / world / t / 1e9}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
