#!/bin/bash
# Measures how long one checkpoint holds up elastic-trainer's training thread (CPU, one rank,
# one intra-op thread) for a GPT-shaped model with a few hundred MB of state (parameters + Adam
# moments), checkpointing every INTERVAL steps (default 12: long enough that a background write
# finishes before the next one comes due on a busy 2-core machine), CHECKPOINTS times per run.
#
# Two measures per checkpoint:
#   gap   the wall time of the step right after the checkpoint minus the median time of the steps
#         that follow no checkpoint (from the trainer's per-step "samples_per_s" lines with
#         --log-interval 1). The same method for any build, old or new.
#   own   the trainer's own figure: "stall_seconds" of its checkpoint lines (the copy on the
#         training thread), or, for builds that write on the training thread, "seconds".
# Prints one Markdown row per build: median and min-max over every checkpoint taken except the
# final one (written at exit, after the last step); checkpoints skipped because the previous
# write was still running are counted, not measured.
# Usage: [GPU=1] bench/checkpoint-stall.sh BUILD_DIR [BUILD_DIR...]   (e.g. build/release /work/old/build)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
interval=${INTERVAL:-12}
checkpoints=${CHECKPOINTS:-7}
workdir=$(mktemp -d "${TMPDIR:-/tmp}/checkpoint-stall.XXXXXX")
trap 'rm -rf "$workdir"' EXIT

model=(--model gpt --gpt-layers 4 --gpt-width 640 --gpt-heads 8 --gpt-vocab 8192
       --gpt-context 32 --batch-size 1 --threads 1)
# GPU=1: GPT-2 small as it is (124 M parameters, fp32: 1.5 GB of parameters + Adam moments) on
# the first CUDA device, per-GPU batch 8 (bench/gpu/run-on-device.sh checkpoint_stall).
if [ "${GPU:-0}" = 1 ]; then
  model=(--model gpt --device cuda --dtype fp32 --batch-size 8)
fi

echo "| build | state MB | checkpoints | gap median s | gap min-max s | own median s | own min-max s |"
echo "|---|---|---|---|---|---|---|"
for build in "$@"; do
  trainer=$build/trainer/elastic-trainer
  [ -x "$trainer" ] || trainer=$here/$build/trainer/elastic-trainer
  [ -x "$trainer" ] || { echo "$build: no trainer/elastic-trainer" >&2; exit 1; }
  rm -rf "$workdir/ckpt"
  "$trainer" "${model[@]}" --no-eval --log-interval 1 --keep 2 \
    --max-steps $((interval * checkpoints + 1)) --checkpoint-interval "$interval" \
    --checkpoint-dir "$workdir/ckpt" > "$workdir/out.jsonl"
  python3 - "$build" "$interval" "$workdir/out.jsonl" "$workdir/ckpt" <<'EOF'
import json, os, statistics, sys
build, interval, path, ckpt = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lines = [json.loads(l) for l in open(path) if l.startswith("{")]
# samples_per_s counts the whole world's samples: a step is batch_size * world_size of them.
start = next(d for d in lines if d.get("event") == "start")
global_batch = start["batch_size"] * start.get("world_size", 1)
steps = {d["step"]: global_batch / d["samples_per_s"] for d in lines
         if d.get("event") == "step" and d.get("samples_per_s")}
last = max(steps)
# Checkpoints that were taken (a new build skips one that comes due while one is written).
taken = {d["step"] for d in lines if d.get("event") == "checkpoint"}
saved = [s for s in steps if s % interval == 0 and s + 1 in steps and s in taken]
normal = [t for s, t in steps.items() if s > 2 and (s - 1) % interval != 0]
base = statistics.median(normal)
gaps = [steps[s + 1] - base for s in saved]
ckpt_lines = [d for d in lines if d.get("event") == "checkpoint" and d["step"] in saved]
own = [d.get("stall_seconds", d.get("seconds")) for d in ckpt_lines]
step_dir = os.path.join(ckpt, sorted(n for n in os.listdir(ckpt) if n.startswith("step-"))[-1])
mb = sum(os.path.getsize(os.path.join(step_dir, f)) for f in os.listdir(step_dir)) / 1e6
def cell(xs):
    return (f"{statistics.median(xs):.3f}", f"{min(xs):.3f}-{max(xs):.3f}") if xs else ("-", "-")
skipped = sum(1 for s in steps if s % interval == 0 and s + 1 in steps and s not in taken)
print(f"| {build} | {mb:.0f} | {len(gaps)} ({skipped} skipped; step {base:.3f} s) | " +
      " | ".join(cell(gaps)) + " | " + " | ".join(cell(own)) + " |")
EOF
done
echo
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: INTERVAL=$interval CHECKPOINTS=$checkpoints bench/checkpoint-stall.sh $*"
