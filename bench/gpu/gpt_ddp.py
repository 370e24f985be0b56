#!/usr/bin/env python3
"""The PyTorch side of the GPU side-by-side: the GPT-2-shaped model of elastic-trainer
(trainer/models.cc) trained with torch.nn.parallel.DistributedDataParallel, under torchrun.

Same network (pre-norm blocks, fused causal attention, exact GELU, tied head, GPT-2 init), same
synthetic data (each sample an arithmetic progression modulo the vocabulary), same parameter
dtype (bf16 parameters, float32 logits for the loss), same optimizer (Adam, lr 1e-3), same
per-GPU batch and DDP's default 25 MiB buckets (the trainer's default too). Adam is PyTorch's
default for CUDA parameters (multi-tensor "foreach"); --fused takes Adam(fused=True), the
kernel elastic-trainer uses on GPUs; --pin copies batches from pinned memory without blocking,
as elastic-trainer does (a plain .to(device) from pageable memory waits for the GPU).

Two modes:
  throughput  --steps N --warmup W: prints one JSON summary (rank 0) with samples/s over the
              steps after the warm-up, timed between two torch.cuda.synchronize() calls.
  recovery    --max-steps N --ckpt-dir D --ckpt-interval K [--timeout S]: resumes from
              D/latest.pt (written by rank 0 through a temporary file and os.replace), logs
              one JSON line per step to stdout and to --jsonl-out (with the wall-clock time), writes
              its pid to --pid-file so the benchmark can kill it, checkpoints every K steps.
"""
import argparse
import datetime
import json
import os
import time

SCRIPT_START = time.time()  # before `import torch`: the start-up phases below are timed from here

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # PyTorch < 2.0 (the --cpu script check on Debian's torch): the same causal attention.
    t = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) / (q.size(-1) ** 0.5)
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, w = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        with torch.no_grad():  # GPT-2's initialisation, as trainer/models.cc
            for name, p in self.named_parameters():
                if "ln" in name:
                    continue
                if "bias" in name:
                    p.zero_()
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, tokens):
        pos = torch.arange(tokens.size(1), device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos).unsqueeze(0)
        for block in self.blocks:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())


def batch_tokens(step, rank, batch, sequence, vocab, seed):
    """Deterministic per (step, rank): resumes see the same data. Made on the CPU and copied,
    as the trainer does."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 4099 + rank)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 8, (batch, 1), generator=g)
    return (start + stride * torch.arange(sequence + 1)) % vocab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["throughput", "recovery"], required=True)
    ap.add_argument("--gpt-layers", type=int, default=12)
    ap.add_argument("--gpt-heads", type=int, default=12)
    ap.add_argument("--gpt-width", type=int, default=768)
    ap.add_argument("--gpt-vocab", type=int, default=50257)
    ap.add_argument("--gpt-context", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--ckpt-dir", default="")
    ap.add_argument("--ckpt-interval", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=0, help="collective timeout, s (0: default)")
    ap.add_argument("--jsonl-out", default="")
    ap.add_argument("--pid-file", default="")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--cpu", action="store_true", help="Gloo on CPU, float32 (a script check)")
    ap.add_argument("--fused", action="store_true", help="Adam(fused=True) (default: foreach)")
    ap.add_argument("--pin", action="store_true",
                    help="batches through pinned memory, copied with non_blocking=True")
    ap.add_argument("--profile", default="",
                    help="throughput: torch.profiler trace of --profile-steps steps after the "
                         "warm-up to PATH.rank<N>.json (Chrome trace)")
    ap.add_argument("--profile-steps", type=int, default=3)
    a = ap.parse_args()

    phases = {"import_torch": time.time() - SCRIPT_START}
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Under elastic the round tells the benchmark which run a line belongs to (absent: 0).
    elastic_round = int(os.environ.get("ELASTIC_ROUND", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if a.pid_file:
        with open(a.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    kw = {"timeout": datetime.timedelta(seconds=a.timeout)} if a.timeout > 0 else {}
    if a.cpu:  # a check of the benchmark scripts on a host without GPUs: Gloo, float32
        device = torch.device("cpu")
        dist.init_process_group("gloo", **kw)
    else:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("nccl", device_id=device, **kw)

    phases["init_process_group"] = time.time() - SCRIPT_START
    torch.manual_seed(a.seed)
    model = Gpt(a.gpt_vocab, a.gpt_context, a.gpt_layers, a.gpt_heads, a.gpt_width)
    phases["model_built"] = time.time() - SCRIPT_START
    model = model.to(device=device, dtype=torch.float32 if a.cpu else torch.bfloat16)
    phases["model_on_device"] = time.time() - SCRIPT_START
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, **({"fused": True} if a.fused else {}))
    step = 0
    ckpt = os.path.join(a.ckpt_dir, "latest.pt") if a.ckpt_dir else ""
    resumed = False
    phases["optimizer"] = time.time() - SCRIPT_START
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device)
        phases["checkpoint_read"] = time.time() - SCRIPT_START
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, resumed = state["step"], True
    phases["model_and_checkpoint"] = time.time() - SCRIPT_START
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if a.cpu else [device.index])
    seq = a.gpt_context
    params = sum(p.numel() for p in model.parameters())
    phases["ddp"] = time.time() - SCRIPT_START

    log = open(a.jsonl_out, "a") if a.jsonl_out else None

    def emit(d):
        d["t"] = time.time()
        d["round"] = elastic_round
        text = json.dumps(d)
        print(text, flush=True)
        if log:
            log.write(text + "\n")
            log.flush()

    if rank == 0:
        emit({"event": "resume" if resumed else "start", "step": step, "world_size": world,
              "restart": restart, "parameters": params, "pid": os.getpid()})

    def one_step(s):
        tokens = batch_tokens(s, rank, a.batch_size, seq, a.gpt_vocab, a.seed)
        tokens = tokens.pin_memory().to(device, non_blocking=True) if a.pin else tokens.to(device)
        logits = ddp(tokens[:, :seq]).float()
        loss = F.cross_entropy(logits.reshape(-1, a.gpt_vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if a.mode == "throughput":
        for s in range(a.warmup):
            one_step(s)
        torch.cuda.synchronize()
        if a.profile:  # a separate run: profiled steps are not the timed ones
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for s in range(a.profile_steps):
                    one_step(a.warmup + s)
                torch.cuda.synchronize()
            prof.export_chrome_trace(f"{a.profile}.rank{rank}.json")
            dist.destroy_process_group()
            return
        t0 = time.perf_counter()
        for s in range(a.steps):
            loss = one_step(a.warmup + s)
        last = loss.item()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if rank == 0:
            emit({"event": "summary", "system": "ddp", "world_size": world,
                  "batch_size": a.batch_size, "steps": a.steps, "seconds": seconds,
                  "samples_per_s": a.steps * a.batch_size * world / seconds, "loss": last,
                  "fused": a.fused, "pin": a.pin,
                  "parameters": params, "torch": torch.__version__,
                  "nccl": str(torch.cuda.nccl.version())})
    else:
        first = True
        while a.max_steps == 0 or step < a.max_steps:
            loss = one_step(step)
            step += 1
            if first and rank == 0:
                first = False
                phases["first_step"] = time.time() - SCRIPT_START
                # Seconds from the script's first line (after the interpreter started) to the end
                # of each phase: what a warm interpreter saves is before the script.
                emit({"event": "startup", "phases": phases})
            if rank == 0:
                emit({"event": "step", "step": step, "loss": loss.item(), "world_size": world,
                      "restart": restart, "pid": os.getpid()})
            if ckpt and step % a.ckpt_interval == 0 and rank == 0:
                tmp = ckpt + ".tmp"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, ckpt)
                emit({"event": "checkpoint", "step": step})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
