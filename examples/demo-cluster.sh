#!/bin/bash
# make demo: elastic training that survives losing a node, on this one machine.
#
# Three hosts as network namespaces on a private bridge (<prefix>-h0..h2, 10.X.250.1-3/24; the
# root namespace gets no interface, route or address), one elasticd per host with the DEFAULT
# configuration (conf/elasticd.toml, CURVE on; only the node name, bind address, seeds, key files,
# voters, state dir, control socket and checkpoint root differ per host; each host's key pair is
# made in the work dir), all three Raft voters. Then:
#   1. the Fashion-MNIST job (examples/fmnist.toml if present, else flags) on 3 nodes, min 2:
#      one elastic-trainer Gloo worker per host, checkpoints on the "shared" work dir;
#   2. kill -9 of one daemon that is not the Raft leader; its worker dies with it
#      (PR_SET_PDEATHSIG), checked in /proc;
#   3. the survivors stop the broken round and resume on 2 nodes from LATEST;
#   4. the daemon restarts (same state dir) and the job grows back to 3 at a checkpoint;
#   5. the job succeeds: final test accuracy and the incident's timeline (detected after X s,
#      first step after Y s, steps lost Z).
# Everything started is ended by pid and the namespaces, veths and bridge are removed on exit
# (also on Ctrl-C); the work dir with every daemon and worker log stays and is printed at the end.
# Without root, or where namespaces cannot be made or entered (probed first: add, exec, bridge,
# veth), the same story runs on 3 daemons on loopback ports (said in one line, with the reason).
#
# Usage: examples/demo-cluster.sh [build dir]   (default $ELASTIC_BUILD_DIR, else build/release;
#        needs elasticd, elasticctl and elastic-trainer built, and the Fashion-MNIST data set:
#        Debian package dataset-fashion-mnist). Environment: DEMO_WORK (work dir; default a new
#        /tmp/elastic-demo-XXXXXX), DEMO_EPOCHS (1), DEMO_TRAIN_LIMIT (samples per epoch, 0 = all
#        60000; default 45000). Takes about a minute on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${ELASTIC_BUILD_DIR:-build/release}}
case $build in /*) ;; *) build=$here/$build ;; esac
elasticd=$build/daemon/elasticd
elasticctl=$build/ctl/elasticctl
trainer=$build/trainer/elastic-trainer
for b in "$elasticd" "$elasticctl" "$trainer"; do
  [ -x "$b" ] || { echo "demo: $b is not built: run 'make' first" >&2; exit 1; }
done
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || [ -r "$data/train-images-idx3-ubyte" ] ||
  { echo "demo: no Fashion-MNIST in $data: apt-get install dataset-fashion-mnist" >&2; exit 1; }
config=$here/conf/elasticd.toml
work=${DEMO_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/elastic-demo-XXXXXX")}
mkdir -p "$work"
epochs=${DEMO_EPOCHS:-1}
train_limit=${DEMO_TRAIN_LIMIT:-45000}
hosts=(0 1 2)
prefix=el-demo-$$
started=$(date +%s.%N)

# ---- cleanup: every process we started, by pid; then the namespaces (veths, bridge with them)
daemon_pids=()
namespaces=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${daemon_pids[@]}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${daemon_pids[@]}"; do
    [ -n "$p" ] || continue
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  # Workers die with their daemon; anything still inside our namespaces is ours: end it by pid.
  for ns in "${namespaces[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  if [ -n "${job:-}" ]; then
    for p in $(worker_pids "$job"); do kill -KILL "$p" 2>/dev/null || true; done
  fi
  for ns in "${namespaces[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
  [ ${#namespaces[@]} -gt 0 ] && echo "demo: removed namespaces ${namespaces[*]} (and their links)"
  echo "demo: logs and checkpoints are in $work (daemons: $work/h*/elasticd.log," \
    "workers: $work/h*/state/logs/)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- helpers
say() { echo; echo "$*"; }
now() { date +%s.%N; }
since() { python3 -c "import sys;print(f'{float(sys.argv[2])-float(sys.argv[1]):.1f}')" "$1" "${2:-$(now)}"; }
die() { echo "demo: $*" >&2; for h in "${hosts[@]}"; do echo "---- h$h daemon log (tail)" >&2;
  tail -n 15 "$work/h$h/elasticd.log" >&2 2>/dev/null || true; done; exit 1; }
wait_for() {  # seconds, description, command...
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}
ctl() { "$elasticctl" -c "$config" --set control.socket="$work/h$1/ctl.sock" "${@:2}"; }
# The pids of job $1's workers: processes whose environment (set by the spawner) names the job.
worker_pids() {  # job [node]
  local f pid
  for f in /proc/[0-9]*/environ; do
    grep -qszx "ELASTIC_JOB_ID=$1" "$f" || continue
    [ -z "${2:-}" ] || grep -qszx "ELASTIC_NODE=$2" "$f" || continue
    pid=${f#/proc/}; echo "${pid%/environ}"
  done
}

# One Python helper for JSON: job status, events, trainer lines from every host's worker logs.
cat >"$work/demo.py" <<'PY'
import glob, json, os, re, subprocess, sys, time

work, ctl_cmd = os.environ["DEMO_WORK_DIR"], os.environ["DEMO_CTL"].split("\x1f")

def ctl(host, *args):
    out = subprocess.run(ctl_cmd + ["--set", f"control.socket={work}/h{host}/ctl.sock"] +
                         list(args), capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout) if out.returncode == 0 else None

def job(host, jid):
    try:
        j = ctl(host, "status", jid, "--json")
    except Exception:
        return None
    return j.get("job", j) if isinstance(j, dict) else None

def trainer_lines(jid):
    lines = []
    for path in sorted(glob.glob(f"{work}/h*/state/logs/{jid}/round-*/rank-*.log")):
        host = path.split("/state/")[0].rsplit("/", 1)[1]
        with open(path, errors="replace") as f:
            for text in f:
                # Past the time stamp elasticd starts each worker line with.
                text = re.sub(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", "", text)
                if not text.startswith("{"):
                    continue
                try:
                    d = json.loads(text)
                except ValueError:
                    continue
                d["_host"] = host
                lines.append(d)
    return lines

def nodes(j):
    return [r["node"] for r in j.get("ranks", [])]

def fmt_event(e, t0):
    rel = f"{e['at_ms'] / 1000 - t0:+6.1f}s" if t0 else time.strftime(
        "%H:%M:%S", time.localtime(e["at_ms"] / 1000))
    return f"     {rel}  round {e['round']}: {e['from']} -> {e['to']}  ({e.get('reason', '')})"

def watch(host, jid, t0, seen, timeout, until, out_file):
    """Prints new job events and new-round trainer lines as they come, until `until` holds;
    records when lines first appeared (arrival times) in out_file."""
    deadline = time.time() + timeout
    arrivals = {}
    shown_file = f"{work}/resumes-shown"
    shown = set(open(shown_file).read().split()) if os.path.exists(shown_file) else set()
    while time.time() < deadline:
        j = job(host, jid)
        if j:
            events = j.get("events", [])
            for e in events[seen:]:
                print(fmt_event(e, t0), flush=True)
            seen = max(seen, len(events))
        for d in trainer_lines(jid):
            key = (d.get("event"), d.get("round"))
            if d.get("event") in ("start", "resume", "step") and key not in arrivals:
                arrivals[key] = (time.time(), d)
                if d["event"] == "resume" and str(d["round"]) not in shown:
                    shown.add(str(d["round"]))
                    with open(shown_file, "a") as f:
                        f.write(f"{d['round']}\n")
                    print(f"     trainer (rank 0 on {d['_host']}, round {d['round']}): resumed "
                          f"from step {d['step']} ({d.get('checkpoint', '')}) with world size "
                          f"{d['world_size']} (was {d.get('from_world_size')})", flush=True)
        if j and until(j, arrivals):
            with open(out_file, "w") as f:
                json.dump({"seen": seen, "job": j,
                           "arrivals": [[k[0], k[1], v[0], v[1]] for k, v in arrivals.items()]}, f)
            return 0
        time.sleep(0.1)
    print("demo: timed out; last job state: " + json.dumps(j), file=sys.stderr)
    return 1

cmd = sys.argv[1]
if cmd == "alive":  # host -> alive member count
    print(sum(m["state"] == "alive" for m in ctl(int(sys.argv[2]), "nodes", "--json")["members"]))
elif cmd == "leader":  # host -> leader name
    print(ctl(int(sys.argv[2]), "status", "--json")["consensus"].get("leader", ""))
elif cmd == "field":  # host job expr  (j = the job)
    j = job(int(sys.argv[2]), sys.argv[3])
    print(eval(sys.argv[4], {"j": j, "nodes": nodes}))
elif cmd == "watch":  # host job t0 seen timeout out_file condition (python over j, arrivals)
    host, jid, t0, seen, timeout, out = sys.argv[2:8]
    cond = eval("lambda j, a: " + sys.argv[8], {"nodes": nodes})
    sys.exit(watch(int(host), jid, float(t0), int(seen), float(timeout), cond, out))
elif cmd == "get":  # file expr (w = the watch result)
    w = json.load(open(sys.argv[2]))
    print(eval(sys.argv[3], {"w": w}))
elif cmd == "lines":  # job expr over the list L of trainer lines
    print(eval(sys.argv[3], {"L": trainer_lines(sys.argv[2])}))
elif cmd == "lost":  # t0 victim: seconds from t0 to the first survivor's job-tier "lost" line
    import datetime
    t0, victim, first = float(sys.argv[2]), sys.argv[3], None
    for path in glob.glob(f"{work}/h*/elasticd.log"):
        for text in open(path, errors="replace"):
            if f"peer {victim} (gen" not in text or " lost" not in text:
                continue
            at = datetime.datetime.strptime(text[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            if at >= t0 - 0.01 and (first is None or at < first):
                first = at
    print(f"{first - t0:.1f}" if first else "?")
PY
export DEMO_WORK_DIR=$work
export DEMO_CTL="$elasticctl"$'\x1f'-c$'\x1f'"$config"
py() { python3 "$work/demo.py" "$@"; }

# ---- 1. hosts
# Namespaces only where everything the demo does with them works: adding one is not enough
# (in some containers `ip netns exec` cannot remount /sys, or veth pairs are not allowed), so
# try each step once on two probe namespaces; anything failing means the loopback fallback,
# with iproute2's own words for why.
probe_netns() {
  local a=$prefix-pa b=$prefix-pb out rc
  out=$( { ip netns add "$a" && ip netns add "$b" &&
           ip netns exec "$a" true &&
           ip -n "$a" link add br0 type bridge &&
           ip -n "$a" link add p0 type veth peer name eth0 netns "$b" &&
           ip -n "$a" link set p0 master br0; } 2>&1 ) && rc=0 || rc=$?
  ip netns delete "$a" 2>/dev/null || true
  ip netns delete "$b" 2>/dev/null || true
  [ "$rc" = 0 ] || netns_problem=$(printf '%s\n' "$out" | grep -v '^$' | head -n 1 || true)
  return "$rc"
}
use_netns=0
netns_problem="not root"
if [ "$(id -u)" = 0 ]; then
  netns_problem="no ip command (iproute2)"
  if command -v ip >/dev/null && probe_netns; then use_netns=1; fi
fi
subnet=10.$((64 + $$ % 128)).250
addr() { if [ $use_netns = 1 ]; then echo "$subnet.$(( $1 + 1 )):7946"; else echo "127.0.0.1:${ports[$1]}"; fi; }
if [ $use_netns = 1 ]; then
  say "1. Three hosts: network namespaces $prefix-h0..h2 on a bridge (in $prefix-s), addresses $subnet.1-3"
  sw=$prefix-s
  namespaces+=("$sw")
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge stp_state 0
  ip -n "$sw" link set br0 up
  for h in "${hosts[@]}"; do
    ns=$prefix-h$h
    namespaces+=("$ns")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "p$h" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$h" master br0
    ip -n "$sw" link set "p$h" up
    ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
else
  echo "demo: network namespaces unavailable (${netns_problem:-unknown}): running the 3 daemons on loopback ports instead"
  say "1. Three hosts: 3 daemons on 127.0.0.1 (loopback fallback)"
  free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
  ports=($(free_port) $(free_port) $(free_port))
fi

# ---- 2. daemons
start_daemon() {  # host
  local h=$1 seeds="" o
  for o in "${hosts[@]}"; do
    [ "$o" = "$h" ] && continue
    seeds+="${seeds:+,}\"h$o@$(addr "$o")\""
  done
  mkdir -p "$work/h$h/state"
  local run=() dashboard=()
  [ $use_netns = 1 ] && run=(ip netns exec "$prefix-h$h")
  # On loopback the three share one address: each dashboard takes a free port, not 8474.
  [ $use_netns = 1 ] || dashboard=(--set dashboard.listen=127.0.0.1:0)
  "${run[@]}" "$elasticd" -c "$config" "${dashboard[@]}" \
    --set node.name="h$h" \
    --set node.state_dir="$work/h$h/state" \
    --set transport.bind="tcp://$(addr "$h")" \
    --set membership.seeds="[$seeds]" \
    --set transport.secret_key_file="$work/keys/h$h.key" \
    --set transport.public_keys_dir="$work/public_keys" \
    --set consensus.voters='["h0","h1","h2"]' \
    --set control.socket="$work/h$h/ctl.sock" \
    --set checkpoint.root="$work/checkpoints" \
    >>"$work/h$h/elasticd.log" 2>&1 &
  daemon_pids[$h]=$!
}
mkdir -p "$work/checkpoints"
# CURVE is on by default: daemons authenticate each other by key. What `make install` and
# configuration management do on a real cluster, here in the work dir: a key pair per host in
# $work/keys, every host's public key in the shared allow-list $work/public_keys.
mkdir -p "$work/public_keys"
chmod 0755 "$work/public_keys"
for h in "${hosts[@]}"; do
  if [ ! -e "$work/keys/h$h.key" ]; then
    "$elasticctl" -c '' keygen --dir "$work/keys" --name "h$h" >/dev/null
  fi
  cp "$work/keys/h$h.pub" "$work/public_keys/h$h.pub"
done
say "2. Starting elasticd on h0 h1 h2 (conf/elasticd.toml; all three Raft voters)"
for h in "${hosts[@]}"; do start_daemon "$h"; done
all_alive() { for h in "${hosts[@]}"; do [ "$(py alive "$h")" = 3 ] || return 1; done; }
wait_for 60 "3 alive members" all_alive
has_leader() { [ -n "$(py leader 0)" ]; }
wait_for 60 "a Raft leader" has_leader
leader=$(py leader 0)
ctl 0 nodes | sed 's/^/     /'
echo "     Raft leader: $leader"

# ---- 3. the job
say "3. Submitting the Fashion-MNIST job on 3 nodes (min 2): one elastic-trainer per host, Gloo on CPU"
train=("$trainer" --model fmnist --data-dir "$data" --threads 1 --batch-size 32 --epochs "$epochs"
       --train-limit "$train_limit" --test-limit 2000 --checkpoint-interval 10 --log-interval 1)
if [ -f "$here/examples/fmnist.toml" ]; then
  submit=(submit "$here/examples/fmnist.toml" --nodes 2:3 --checkpoint-root "$work/checkpoints")
  echo "     elasticctl submit examples/fmnist.toml --nodes 2:3 -- elastic-trainer ${train[*]:1}"
else
  submit=(submit --name fmnist --nodes 2:3 --checkpoint-root "$work/checkpoints")
  echo "     elasticctl submit --name fmnist --nodes 2:3 -- elastic-trainer ${train[*]:1}"
fi
t_submit=$(now)
job=$(ctl 0 "${submit[@]}" --json -- "${train[@]}" |
      python3 -c 'import json,sys;d=json.load(sys.stdin);print(d.get("job",d).get("id",""))') ||
  die "the job was refused"
[ -n "$job" ] || die "no job id in the submit reply"
echo "     job $job accepted; waiting until it trains on 3 nodes"
py watch 0 "$job" "${t_submit}" 0 120 "$work/w1.json" \
  'j["state"] == "running" and len(nodes(j)) == 3 and any(k[0] == "step" and k[1] == j["round"] for k in a)' ||
  die "the job did not start training on 3 nodes"
seen=$(py get "$work/w1.json" 'w["seen"]')
round1=$(py get "$work/w1.json" 'w["job"]["round"]')
wait_for 60 "a checkpoint" test -s "$work/checkpoints/$job/LATEST"
echo "     training: $(py lines "$job" '[l for l in L if l["event"]=="step"][-1]["step"]') steps," \
  "checkpoint $(cat "$work/checkpoints/$job/LATEST")"
ctl 0 status "$job" | sed -e '/^  [0-9]\{4\}-/d' -e 's/^/     /'

# ---- 4. the incident
leader=$(py leader 0)
victim=$(py field 0 "$job" "[n for n in nodes(j) if n != '$leader'][-1]")
v=${victim#h}
survivor=$(( (v + 1) % 3 )); [ "h$survivor" = "$victim" ] && survivor=$(( (v + 2) % 3 ))
vpids=$(worker_pids "$job" "$victim" | tr '\n' ' ')
say "4. kill -9 of elasticd on $victim (not the leader $leader; pid ${daemon_pids[$v]}, its worker pid(s): ${vpids% })"
t_kill=$(now)
kill -KILL "${daemon_pids[$v]}"
wait "${daemon_pids[$v]}" 2>/dev/null || true
daemon_pids[$v]=""
workers_gone() { for p in $vpids; do [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null && return 1; done; return 0; }
if wait_for 10 "the workers of $victim to die" workers_gone; then
  echo "     its worker(s) ${vpids% } died with it, $(since "$t_kill") s later (PR_SET_PDEATHSIG): no orphan keeps training"
fi
last_step_before=$(py lines "$job" "max([l['step'] for l in L if l['event']=='step' and l.get('round')==$round1] or [0])")

# ---- 5. recovery on 2 nodes
say "5. The survivors recover on 2 nodes from the last checkpoint (events from the leader, times after the kill):"
py watch "$survivor" "$job" "$t_kill" "$seen" 120 "$work/w2.json" \
  "j['state'] == 'running' and j['round'] > $round1 and len(nodes(j)) == 2 and any(k[0] == 'step' and k[1] == j['round'] for k in a)" ||
  die "the job did not recover on 2 nodes"
seen=$(py get "$work/w2.json" 'w["seen"]')
round2=$(py get "$work/w2.json" 'w["job"]["round"]')
echo "     running on $(py get "$work/w2.json" '",".join(r["node"] for r in w["job"]["ranks"])') in round $round2"

# ---- 6. the node comes back
say "6. Restarting elasticd on $victim (same state dir): the job grows back to 3 at a checkpoint"
t_restart=$(now)
start_daemon "$v"
py watch "$survivor" "$job" "$t_kill" "$seen" 150 "$work/w3.json" \
  "j['state'] == 'running' and len(nodes(j)) == 3 and j['round'] > $round2 and any(k[0] == 'step' and k[1] == j['round'] for k in a) or j['state'] in ('succeeded', 'failed', 'cancelled')" ||
  die "the job did not grow back to 3 nodes"
seen=$(py get "$work/w3.json" 'w["seen"]')
state=$(py get "$work/w3.json" 'w["job"]["state"]')
if [ "$state" = running ]; then
  echo "     running on 3 nodes again in round $(py get "$work/w3.json" 'w["job"]["round"]'), $(since "$t_restart") s after the restart"
else
  echo "     the job ended ($state) before it could grow: raise DEMO_TRAIN_LIMIT for a longer run"
fi

# ---- 7. the end
say "7. Training to the end"
py watch "$survivor" "$job" "$t_kill" "$seen" 300 "$work/w4.json" \
  'j["state"] in ("succeeded", "failed", "cancelled")' || die "the job did not finish"
state=$(py get "$work/w4.json" 'w["job"]["state"]')
[ "$state" = succeeded ] || die "the job ended $state: $(py get "$work/w4.json" 'w["job"]["reason"]')"
accuracy=$(py lines "$job" "'%.1f%%' % (100 * [l['test_accuracy'] for l in L if 'test_accuracy' in l][-1]) if any('test_accuracy' in l for l in L) else 'n/a'")
steps=$(py lines "$job" "max(l['step'] for l in L if l['event'] == 'summary')")
echo "     $job succeeded after $steps steps: test accuracy $accuracy (2000 Fashion-MNIST test images)"

# ---- 8. the timeline
after_kill="[e for e in w['job']['events'] if e['at_ms'] / 1000 >= $t_kill]"
first_event=$(py get "$work/w2.json" "'%s -> %s: %s' % ($after_kill[0]['from'], $after_kill[0]['to'], $after_kill[0]['reason'])")
opened=$(py get "$work/w2.json" "min(e['at_ms'] for e in $after_kill if e['to'] == 'rendezvous') / 1000 - $t_kill")
first_step=$(py get "$work/w2.json" "min(t for (ev, r, t, d) in w['arrivals'] if ev == 'step' and r == $round2) - $t_kill")
resumed=$(py get "$work/w2.json" "[d['step'] for (ev, r, t, d) in w['arrivals'] if ev in ('resume', 'start') and r == $round2][0]")
lost=$(py lost "$t_kill" "$victim")
say "8. Incident timeline (kill -9 of $victim at +0.0 s)"
printf '     detected after   %5s s  (the survivors'"'"' job tier declared %s lost)\n' "$lost" "$victim"
printf '     new round after  %5.1f s  (round %s without %s, once its 3 s lease had run out: %s)\n' "$opened" "$round2" "$victim" "$first_event"
printf '     first step after %5.1f s  (the first step line of round %s, on 2 nodes)\n' "$first_step" "$round2"
echo "     steps lost       $(( last_step_before - resumed ))      (last step logged before the kill: $last_step_before; resumed from step $resumed)"
say "9. The same incidents as the leader recorded them (elasticctl events $job: detected, stopped, rendezvous, first step)"
ctl "$survivor" events "$job" | awk '/^incident/ {show = 1} show' | sed 's/^/     /'
echo "     whole demo: $(since "$started") s"
