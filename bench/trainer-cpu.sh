#!/bin/bash
# Measures elastic-trainer throughput on CPU (Gloo, 2 local ranks x 1 thread) with gradient
# all-reduce overlapped with backward and without, for the Fashion-MNIST CNN and a small
# GPT-shaped model. Prints a Markdown table row per run; numbers are the trainers' own
# "samples_per_s" (steady state: the first --warmup-steps are left out), median of REPEATS.
# Usage: bench/trainer-cpu.sh [build dir]   (default build/release)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
trainer="$here/${1:-build/release}/trainer/elastic-trainer"
repeats=${REPEATS:-3}
[ -x "$trainer" ] || { echo "$trainer not built" >&2; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

measure() {  # name, then trainer flags
  local name=$1; shift
  for overlap in on off; do
    local extra=()
    [ $overlap = off ] && extra=(--no-overlap)
    local rates=()
    for _ in $(seq "$repeats"); do
      rate=$("$trainer" --standalone 2 --threads 1 --no-eval --warmup-steps 10 "$@" "${extra[@]}" |
        grep '"event":"summary"' | grep '"rank":0' | sed 's/.*"samples_per_s":\([0-9.e+]*\).*/\1/')
      rates+=("$rate")
    done
    printf '| %s | %s | %.0f |\n' "$name" "$overlap" "$(printf '%s\n' "${rates[@]}" | median)"
  done
}

echo "| workload | overlap | samples/s (2 ranks) |"
echo "|---|---|---|"
measure "fmnist CNN, batch 64/rank" --model fmnist --batch-size 64 --max-steps 200
measure "gpt 4x256 (ctx 64), batch 8/rank" --model gpt --gpt-layers 4 --gpt-width 256 \
  --gpt-heads 4 --gpt-vocab 1024 --gpt-context 64 --batch-size 8 --max-steps 60 --bucket-mb 1
