#!/bin/bash
# Trains the Fashion-MNIST CNN with 2 local Gloo ranks for one epoch, checkpointing to a
# temporary directory, and prints the trainer's JSON lines (see README "Trainer output").
# Usage: examples/train-fmnist-local.sh [extra elastic-trainer flags]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${ELASTIC_BUILD_DIR:-build/release}
trainer="$here/$build/trainer/elastic-trainer"
[ -x "$trainer" ] || { echo "$trainer not built: run 'make' first" >&2; exit 1; }
ckpt=${ELASTIC_CHECKPOINT_DIR:-$(mktemp -d /tmp/elastic-demo-XXXXXX)}
echo "checkpoints in $ckpt" >&2
exec "$trainer" --standalone 2 --model fmnist --epochs 1 --batch-size 64 --threads 1 \
  --checkpoint-dir "$ckpt" --checkpoint-interval 100 --log-interval 50 "$@"
