#!/bin/bash
# A demo cluster on this one machine: three elasticd daemons on loopback with the default
# configuration (conf/elasticd.toml; only ports, state and socket paths differ per daemon), the
# member table from elasticctl, a kill -9 and its detection, then a 2-rank Fashion-MNIST run of
# elastic-trainer. Jobs are not scheduled by the daemons yet (see README, Status).
# Usage: examples/demo-cluster.sh [build dir]   (default build/release)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/${1:-${ELASTIC_BUILD_DIR:-build/release}}
elasticd=$build/daemon/elasticd
elasticctl=$build/ctl/elasticctl
for b in "$elasticd" "$elasticctl" "$build/trainer/elastic-trainer"; do
  [ -x "$b" ] || { echo "$b not built: run 'make' first" >&2; exit 1; }
done
work=$(mktemp -d /tmp/elastic-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ports=($(free_port) $(free_port) $(free_port))
start() {  # index
  local i=$1
  mkdir -p "$work/n$i"
  "$elasticd" -c "$here/conf/elasticd.toml" \
    --set node.name="demo-$i" --set node.state_dir="$work/n$i" \
    --set transport.bind="tcp://127.0.0.1:${ports[$i]}" \
    --set membership.seeds="[\"127.0.0.1:${ports[0]}\"]" \
    --set control.socket="$work/n$i/ctl.sock" 2>"$work/n$i/log" &
  pids[$i]=$!
}
ctl() { "$elasticctl" -c '' --set control.socket="$work/n0/ctl.sock" "$@"; }
wait_for() {  # seconds, description, command...
  local limit=$1 what=$2; shift 2
  for _ in $(seq $((limit * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "demo: timed out waiting for $what" >&2; exit 1
}
alive_count() { ctl nodes --json | python3 -c 'import json,sys;d=json.load(sys.stdin);print(sum(m["state"]=="alive" for m in d["members"]))'; }

echo "== starting 3 daemons (logs in $work)"
for i in 0 1 2; do start $i; done
three_alive() { [ "$(alive_count)" = 3 ]; }
wait_for 30 "3 alive members" three_alive
ctl nodes
echo "== kill -9 demo-2; SWIM + Lifeguard notice (default timers: about 5-10 s)"
t0=$(date +%s.%N)
kill -KILL "${pids[2]}"; wait "${pids[2]}" 2>/dev/null || true; unset 'pids[2]'
one_dead() { ctl nodes --json | grep -q '"dead"'; }
wait_for 60 "demo-2 marked dead" one_dead
echo "detected after $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
ctl nodes
echo "== elastic-trainer: 2 Gloo ranks, one epoch of Fashion-MNIST"
"$build/trainer/elastic-trainer" --standalone 2 --model fmnist --epochs 1 --batch-size 64 \
  --threads 1 --checkpoint-dir "$work/ckpt" --checkpoint-interval 100 --log-interval 100
