#!/bin/bash
# Throughput side by side on one GPU host: elastic-trainer (LibTorch C++, its own bucketed
# all-reduce overlapped with backward, fused Adam, control values read one step late) against
# PyTorch DDP (bench/gpu/gpt_ddp.py: as users write it, with fused Adam, and with fused Adam plus
# pinned non-blocking batches, the trainer's own data path) on the same
# GPT-2-small-shaped model, per-GPU batch and bf16 parameters, on 1, 2 and 4 GPUs (those the
# host has); scaling efficiency = samples/s on N GPUs / (N x samples/s on 1).
# Also: on 1 GPU the trainer's old compute path (--no-fused-adam, --sync-every-step, and both,
# which is what was shipped before); on >= 2 GPUs the trainer with CUDA-event timing of every
# all-reduce (--comm-timing: the bus bandwidth it reaches), with and without overlap, and the
# bus bandwidth of a plain NCCL all-reduce (bench/gpu/allreduce.py) at 1, 25, 237 MiB, 1 GiB.
# Usage: bench/gpu/throughput.sh TRAINER OUTDIR   (env: GPUS="1 2 4", STEPS=60, WARMUP=10,
#        BATCH=8, REPEAT=1, FULL=0: 1 adds DDP with fused Adam alone and the plain NCCL runs).
#        Writes OUTDIR/throughput.jsonl; prints Markdown tables last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trainer=$1
out=$2
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
have=$(nvidia-smi -L | wc -l)
gpus=${GPUS:-"1 2 4"}
steps=${STEPS:-60}
warmup=${WARMUP:-10}
batch=${BATCH:-8}
repeat=${REPEAT:-1}
jsonl=$out/throughput.jsonl
touch "$jsonl"
raw=$out/throughput-raw.log
: >"$raw"
tag() { python3 -c 'import json,sys
extra=json.loads(sys.argv[1])
for line in sys.stdin:
    line=line.strip()
    if not line.startswith("{"): continue
    try: d=json.loads(line)
    except ValueError: continue
    if d.get("event") in ("summary","allreduce") and d.get("rank",0)==0:
        d.update(extra); print(json.dumps(d), flush=True)' "$1"; }

trainer_run() {  # SYSTEM N [flags...]
  local system=$1 n=$2; shift 2
  echo "== $n GPU(s): $system $*" >&2
  "$trainer" --standalone "$n" --model gpt --dtype bf16 --device cuda --batch-size "$batch" \
    --max-steps $((steps + warmup)) --warmup-steps "$warmup" --no-eval --log-interval 1000 \
    --seed 42 "$@" 2>>"$raw" | tee -a "$raw" | tag "{\"system\":\"$system\",\"gpus\":$n}" >>"$jsonl"
}
ddp_run() {  # SYSTEM N [flags...]
  local system=$1 n=$2; shift 2
  echo "== $n GPU(s): $system $*" >&2
  torchrun --standalone --nproc-per-node "$n" "$here/gpt_ddp.py" --mode throughput \
    --batch-size "$batch" --steps "$steps" --warmup "$warmup" "$@" 2>>"$raw" | tee -a "$raw" |
    tag "{\"system\":\"$system\",\"gpus\":$n}" >>"$jsonl"
}

for r in $(seq "$repeat"); do
for n in $gpus; do
  [ "$n" -le "$have" ] || { echo "throughput: skipping $n GPUs (host has $have)" >&2; continue; }
  trainer_run elastic-trainer "$n"
  ddp_run ddp "$n"
  [ "${FULL:-0}" = 1 ] && ddp_run ddp-fused "$n" --fused
  ddp_run ddp-tuned "$n" --fused --pin
  if [ "$n" -eq 1 ] && [ "$r" -eq 1 ]; then
    trainer_run trainer-old-path "$n" --no-fused-adam --sync-every-step
    trainer_run trainer-no-fused-adam "$n" --no-fused-adam
    trainer_run trainer-sync-every-step "$n" --sync-every-step
  fi
  if [ "$n" -ge 2 ] && [ "$r" -eq 1 ]; then
    trainer_run trainer-timed "$n" --comm-timing
    trainer_run trainer-no-overlap-timed "$n" --no-overlap --comm-timing
    [ "${FULL:-0}" = 1 ] || continue
    echo "== $n GPUs: plain NCCL all-reduce" >&2
    torchrun --standalone --nproc-per-node "$n" "$here/allreduce.py" --sizes-mib 1 25 237.3 1024 \
      2>>"$raw" | tee -a "$raw" | tag "{\"system\":\"nccl\",\"gpus\":$n}" >>"$jsonl"
  fi
done
done

python3 - "$jsonl" "$batch" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
batch = int(sys.argv[2])
runs = defaultdict(list)
for r in rows:
    if "samples_per_s" in r:
        runs[(r["system"], r["gpus"])].append(r["samples_per_s"])
sps = {k: statistics.median(v) for k, v in runs.items()}
f = lambda v: f"{v:.1f}" if v else "-"
gpus = sorted({r["gpus"] for r in rows})
print("\n| GPUs | elastic-trainer samples/s | DDP (as users write it) | trainer / DDP | DDP fused Adam | trainer / it | DDP fused Adam + pinned data | trainer / it | trainer scaling | DDP scaling | DDP fused scaling | DDP tuned scaling |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in gpus:
    e, d, df, dt = (sps.get((s, n)) for s in ("elastic-trainer", "ddp", "ddp-fused", "ddp-tuned"))
    e1, d1, df1, dt1 = (sps.get((s, 1)) for s in ("elastic-trainer", "ddp", "ddp-fused", "ddp-tuned"))
    ratio = lambda x, y: f"{x / y:.3f}" if x and y else "-"
    scale = lambda x, x1: f"{100 * x / (n * x1):.1f}%" if x and x1 else "-"
    print(f"| {n} | {f(e)} | {f(d)} | {ratio(e, d)} | {f(df)} | {ratio(e, df)} | {f(dt)} | {ratio(e, dt)} | {scale(e, e1)} | {scale(d, d1)} | {scale(df, df1)} | {scale(dt, dt1)} |")
print(f"\nper-GPU batch {batch} x 1024 tokens, bf16 parameters; median of {max(len(v) for v in runs.values())} run(s)")
print("\n1 GPU, the trainer's compute path (samples/s):")
for s in ("trainer-old-path", "trainer-no-fused-adam", "trainer-sync-every-step", "elastic-trainer"):
    if (s, 1) in sps: print(f"  {s:26s} {sps[(s, 1)]:.1f}")
print("\n| GPUs | trainer timed samples/s | all-reduce GPU ms/step | busbw reached | --no-overlap samples/s | its all-reduce ms/step | its busbw | NCCL busbw 1 MiB | 25 MiB | 237 MiB | 1 GiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
last = lambda s, n: next((r for r in reversed(rows) if r["system"] == s and r["gpus"] == n and "samples_per_s" in r), {})
for n in [g for g in gpus if g >= 2]:
    t, no = last("trainer-timed", n), last("trainer-no-overlap-timed", n)
    cells = [f(t.get("samples_per_s")), f"{1000 * t['allreduce_gpu_s_per_step']:.2f}" if "allreduce_gpu_s_per_step" in t else "-",
             f"{t['allreduce_busbw_gbs']:.0f} GB/s" if "allreduce_busbw_gbs" in t else "-",
             f(no.get("samples_per_s")), f"{1000 * no['allreduce_gpu_s_per_step']:.2f}" if "allreduce_gpu_s_per_step" in no else "-",
             f"{no['allreduce_busbw_gbs']:.0f} GB/s" if "allreduce_busbw_gbs" in no else "-"]
    nccl = {round(r["bytes"] / 2**20): r for r in rows if r["system"] == "nccl" and r["gpus"] == n}
    for mib in (1, 25, 237, 1024):
        v = nccl.get(mib)
        cells.append(f"{v['busbw_gbs']:.0f} GB/s" if v else "-")
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
