#!/usr/bin/env python3
"""A minimal torchrun-style DDP training script that runs unchanged under elasticd.

    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 200          # torchrun
    elasticctl submit examples/ddp_script.toml                             # elasticd

Everything it needs comes from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT: init_process_group("env://")), which elasticd sets for every worker.
NCCL on GPUs (one per process, by LOCAL_RANK), else Gloo on CPUs. The model is tiny and the
data synthetic (a noisy linear function drawn from a seeded generator per step and rank), so it
needs no download and a restart sees exactly the data it would have seen.

Checkpoints (rank 0, every --checkpoint-every steps) go to --checkpoint-dir, else
$ELASTIC_CHECKPOINT_DIR (elasticd's <checkpoint_root>/<job id>), else nowhere. They use
elasticd's layout, so `elasticctl status` shows their age without any reporting:
<dir>/step-NNNNNNNNN/model.pt, published by renaming a finished temporary directory, then
<dir>/LATEST (written to a temporary file and renamed) names it. At start every rank loads the
checkpoint LATEST names, if any, and continues from its step: a restarted job loses at most
--checkpoint-every steps.

The optional elastic_worker module (python/elastic_worker.py; elasticd puts it on the workers'
PYTHONPATH) reports steps and checkpoints to the daemon: true incident timelines and, with the
job's hang_timeout, hang detection. Without it (torchrun, plain python) the script is the same.
"""

import argparse
import os
import shutil
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:
    import elastic_worker
except ImportError:
    elastic_worker = None

FEATURES = 16


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="train until this global step")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=50, help="0 = never")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("ELASTIC_CHECKPOINT_DIR", ""),
                        help="default: $ELASTIC_CHECKPOINT_DIR; '' = no checkpoints")
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="sleep this long in every step (to watch a job run or recover)")
    return parser.parse_args()


def batch(step, rank, size, device):
    """The step's samples for this rank: the same on every run, so a restart repeats nothing."""
    generator = torch.Generator().manual_seed(step * 100_003 + rank)
    x = torch.randn(size, FEATURES, generator=generator)
    truth = torch.arange(1, FEATURES + 1, dtype=torch.float32) / FEATURES
    y = x @ truth + 0.01 * torch.randn(size, generator=generator)
    return x.to(device), y.unsqueeze(1).to(device)


def latest_checkpoint(directory):
    """(step, path of model.pt) of the checkpoint LATEST names, or (0, None)."""
    try:
        with open(os.path.join(directory, "LATEST")) as latest:
            name = latest.read().strip()
    except OSError:
        return 0, None
    path = os.path.join(directory, name, "model.pt")
    if not name.startswith("step-") or not os.path.exists(path):
        return 0, None
    return int(name[len("step-"):]), path


def save_checkpoint(directory, step, model, optimizer, keep=2):
    """Publishes step's checkpoint atomically: a crash at any point leaves LATEST valid."""
    os.makedirs(directory, exist_ok=True)
    name = "step-%09d" % step
    scratch = os.path.join(directory, ".tmp-" + name)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    with open(os.path.join(scratch, "model.pt"), "wb") as out:
        torch.save({"step": step, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, out)
        out.flush()
        os.fsync(out.fileno())
    final = os.path.join(directory, name)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(scratch, final)
    with open(os.path.join(directory, "LATEST.tmp"), "w") as out:
        out.write(name + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(os.path.join(directory, "LATEST.tmp"), os.path.join(directory, "LATEST"))
    older = sorted(entry for entry in os.listdir(directory)
                   if entry.startswith("step-") and entry != name)
    for entry in older[:max(0, len(older) - (keep - 1))]:
        shutil.rmtree(os.path.join(directory, entry), ignore_errors=True)


def main():
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    if args.checkpoint_dir:
        start, path = latest_checkpoint(args.checkpoint_dir)
        if path is not None:
            state = torch.load(path, map_location=device)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if elastic_worker:
                elastic_worker.resumed(start)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    if rank == 0:
        print("rank 0 of %d: %s, resuming from step %d" % (world, device, start)
              if start else "rank 0 of %d: %s, starting fresh" % (world, device))

    loss_fn = nn.MSELoss()
    loss = None
    for step in range(start, args.steps):
        x, y = batch(step, rank, args.batch_size, device)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP averages the gradients over every rank here
        optimizer.step()
        done = step + 1
        if elastic_worker:
            elastic_worker.step(done)
        if rank == 0 and done % args.log_every == 0:
            print("step %d loss %.5f" % (done, loss.item()))
        if (rank == 0 and args.checkpoint_dir and args.checkpoint_every > 0
                and (done % args.checkpoint_every == 0 or done == args.steps)):
            save_checkpoint(args.checkpoint_dir, done, model, optimizer)
            if elastic_worker:
                elastic_worker.checkpoint(done)
        if args.step_seconds > 0:
            time.sleep(args.step_seconds)
    if rank == 0:
        print("done: step %d loss %.5f world %d" % (args.steps, loss.item() if loss is not None
                                                     else float("nan"), world))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
