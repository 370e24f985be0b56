#!/bin/bash
# A demo cluster on this one machine: four elasticd daemons on loopback with the default
# configuration (conf/elasticd.toml; only ports, state and socket paths differ per daemon, and
# demo-0..2 are the Raft voters), the member table and the Raft leader from elasticctl, a job
# submitted to the replicated job table and its first round (3 of 4 nodes), a kill -9 of a
# member: the job tier declares it lost and the leader opens the next round on the survivors
# plus the spare node. Then a 2-rank Fashion-MNIST run of elastic-trainer. The daemons do not
# start workers yet (the spawner is issue 5; see README, Status).
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
ports=($(free_port) $(free_port) $(free_port) $(free_port))
start() {  # index
  local i=$1
  mkdir -p "$work/n$i"
  "$elasticd" -c "$here/conf/elasticd.toml" \
    --set node.name="demo-$i" --set node.state_dir="$work/n$i" \
    --set transport.bind="tcp://127.0.0.1:${ports[$i]}" \
    --set membership.seeds="[\"127.0.0.1:${ports[0]}\"]" \
    --set consensus.voters='["demo-0","demo-1","demo-2"]' \
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

ctl3() { "$elasticctl" -c '' --set control.socket="$work/n3/ctl.sock" "$@"; }
job_field() {  # job, python expression over the job's JSON `j`
  ctl3 status "$1" --json | python3 -c "import json,sys;j=json.load(sys.stdin);print($2)"
}

echo "== starting 4 daemons, 3 of them Raft voters (logs in $work)"
for i in 0 1 2 3; do start $i; done
four_alive() { [ "$(alive_count)" = 4 ]; }
wait_for 30 "4 alive members" four_alive
has_leader() { ctl status --json | grep -q '"leader": "demo-'; }
wait_for 30 "a Raft leader" has_leader
ctl nodes
ctl status
echo "== submit a job for 2 to 3 nodes through demo-3 (not a voter: forwarded to the leader)"
job=$(ctl3 submit --name demo --nodes 2:3 -- /bin/true | awk '{print $2}')
running() { [ "$(job_field "$job" 'j["state"]+str(j["round"])')" = "running$1" ]; }
wait_for 30 "round 1 running" running 1
ctl3 status "$job"
victim=$(job_field "$job" '[r["node"] for r in j["ranks"] if r["node"]!="demo-0"][-1]')
leader=$(ctl status --json | python3 -c 'import json,sys;print(json.load(sys.stdin)["consensus"]["leader"])')
[ "$victim" = "$leader" ] && victim=$(job_field "$job" '[r["node"] for r in j["ranks"] if r["node"]!="'"$leader"'"][-1]')
i=${victim#demo-}
echo "== kill -9 $victim (a member of round 1): the job tier declares it lost, the leader opens round 2"
t0=$(date +%s.%N)
kill -KILL "${pids[$i]}"; wait "${pids[$i]}" 2>/dev/null || true; unset "pids[$i]"
wait_for 60 "round 2 running" running 2
echo "round 2 running $(python3 -c "import time;print(round(time.time()-$t0,1))") s after the kill" \
  "(detection ~0.4 s, then the lost node's 3 s lease must run out)"
ctl3 status "$job"
ctl3 jobs
echo "== elastic-trainer: 2 Gloo ranks, one epoch of Fashion-MNIST"
"$build/trainer/elastic-trainer" --standalone 2 --model fmnist --epochs 1 --batch-size 64 \
  --threads 1 --checkpoint-dir "$work/ckpt" --checkpoint-interval 100 --log-interval 100
