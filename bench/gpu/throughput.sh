#!/bin/bash
# Throughput side by side on one GPU host: elastic-trainer (LibTorch C++, its own bucketed
# all-reduce overlapped with backward) against PyTorch DDP (bench/gpu/gpt_ddp.py) on the same
# GPT-2-small-shaped model, per-GPU batch and bf16 parameters, on 1, 2 and 4 GPUs (those the
# host has); scaling efficiency = samples/s on N GPUs / (N x samples/s on 1); the trainer with
# --no-overlap (all-reduce after backward) to see what overlap gains; and the bus bandwidth of
# a plain NCCL all-reduce (bench/gpu/allreduce.py) at the trainer's bucket size (25 MiB), its
# first bucket (1 MiB), the whole bf16 gradient (237 MiB) and 1 GiB.
# Usage: bench/gpu/throughput.sh TRAINER OUTDIR   (env: GPUS="1 2 4", STEPS=60, WARMUP=10,
#        BATCH=8). Writes OUTDIR/throughput.jsonl; prints a Markdown table last.
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
jsonl=$out/throughput.jsonl
: >"$jsonl"
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

for n in $gpus; do
  [ "$n" -le "$have" ] || { echo "throughput: skipping $n GPUs (host has $have)" >&2; continue; }
  echo "== $n GPU(s): elastic-trainer" >&2
  "$trainer" --standalone "$n" --model gpt --dtype bf16 --device cuda --batch-size "$batch" \
    --max-steps $((steps + warmup)) --warmup-steps "$warmup" --no-eval --log-interval 1000 \
    --seed 42 2>>"$raw" | tee -a "$raw" | tag "{\"system\":\"elastic-trainer\",\"gpus\":$n}" >>"$jsonl"
  echo "== $n GPU(s): PyTorch DDP" >&2
  torchrun --standalone --nproc-per-node "$n" "$here/gpt_ddp.py" --mode throughput \
    --batch-size "$batch" --steps "$steps" --warmup "$warmup" 2>>"$raw" | tee -a "$raw" |
    tag "{\"system\":\"ddp\",\"gpus\":$n}" >>"$jsonl"
  if [ "$n" -ge 2 ]; then
    echo "== $n GPUs: elastic-trainer --no-overlap (all-reduce time)" >&2
    "$trainer" --standalone "$n" --model gpt --dtype bf16 --device cuda --batch-size "$batch" \
      --max-steps $((steps + warmup)) --warmup-steps "$warmup" --no-eval --log-interval 1000 \
      --no-overlap 2>>"$raw" | tee -a "$raw" |
      tag "{\"system\":\"elastic-trainer-no-overlap\",\"gpus\":$n}" >>"$jsonl"
    echo "== $n GPUs: plain NCCL all-reduce" >&2
    torchrun --standalone --nproc-per-node "$n" "$here/allreduce.py" --sizes-mib 1 25 237.3 1024 \
      2>>"$raw" | tee -a "$raw" | tag "{\"system\":\"nccl\",\"gpus\":$n}" >>"$jsonl"
  fi
done

python3 - "$jsonl" "$batch" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
batch = int(sys.argv[2])
sps = {(r["system"], r["gpus"]): r["samples_per_s"] for r in rows if "samples_per_s" in r}
params = next((r.get("parameters") for r in rows if r.get("parameters")), None)
print(f"\n| GPUs | elastic-trainer samples/s | DDP samples/s | trainer / DDP | trainer scaling | DDP scaling |")
print("|---|---|---|---|---|---|")
for n in sorted({r["gpus"] for r in rows}):
    e, d = sps.get(("elastic-trainer", n)), sps.get(("ddp", n))
    e1, d1 = sps.get(("elastic-trainer", 1)), sps.get(("ddp", 1))
    f = lambda v: f"{v:.1f}" if v else "-"
    ratio = f"{e / d:.3f}" if e and d else "-"
    es = f"{100 * e / (n * e1):.1f}%" if e and e1 else "-"
    ds = f"{100 * d / (n * d1):.1f}%" if d and d1 else "-"
    print(f"| {n} | {f(e)} | {f(d)} | {ratio} | {es} | {ds} |")
print(f"\nper-GPU batch {batch} x 1024 tokens, bf16 parameters, Adam")
# The trainer's comm_wait_s cannot give its all-reduce time on GPUs: a ProcessGroupNCCL work's
# wait() only makes the compute stream wait, the host does not block. So the table shows what
# the trainer gains or loses from overlap, and the NCCL time of one step's gradient at the
# trainer's bucket size (25 MiB) and as one all-reduce, from the plain NCCL runs.
print("\n| GPUs | trainer samples/s | trainer --no-overlap samples/s | --no-overlap scaling | NCCL busbw 1 MiB | 25 MiB | 237 MiB (the gradient) | 1 GiB | gradient all-reduce time, 25 MiB buckets / one call |")
print("|---|---|---|---|---|---|---|---|---|")
no1 = sps.get(("elastic-trainer", 1))
for n in sorted({r["gpus"] for r in rows if r["gpus"] >= 2}):
    nccl = {round(r["bytes"] / 2**20): r for r in rows if r["system"] == "nccl" and r["gpus"] == n}
    e, no = sps.get(("elastic-trainer", n)), sps.get(("elastic-trainer-no-overlap", n))
    cells = [f"{e:.1f}" if e else "-", f"{no:.1f}" if no else "-",
             f"{100 * no / (n * no1):.1f}%" if no and no1 else "-"]
    for mib in (1, 25, 237, 1024):
        v = nccl.get(mib)
        cells.append(f"{v['busbw_gbs']:.0f} GB/s" if v else "-")
    if params and 25 in nccl and 237 in nccl:
        grad = 2 * params
        bucketed = grad / nccl[25]["bytes"] * nccl[25]["median_s"]
        cells.append(f"{1000 * bucketed:.2f} ms / {1000 * nccl[237]['median_s']:.2f} ms")
    else:
        cells.append("-")
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
