#!/bin/bash
# slurm_elastic_test.sh: the elastic Slurm hooks (slurm/) against a real Slurm (Debian's
# slurmctld/slurmd/munge): 3 slurmd as 3 hosts in network namespaces with 4 fake GPUs each.
#
#   case 1: an sbatch -N3 --gres=gpu:2 job whose script runs `elasticctl submit --wait` of a short
#           Fashion-MNIST elastic-trainer job (nodes 2:3, checkpoints in a shared dir). The
#           prologs start one elasticd per node (cluster slurm-<jobid>); the job trains on 3
#           nodes; the test kills -9 the elasticd of a node that is neither the first nor the
#           Raft leader; the 2 survivors re-form in place (no checkpoint read) and succeed;
#           the Slurm job COMPLETES with exit code 0. Afterwards every node's epilog ran, no
#           elasticd or worker of the allocation is left (the recorded pids and a /proc scan),
#           the runtime files are gone, the worker logs stay, every node is idle.
#   case 2: the site settings point elasticd at a broken config: the prolog fails, the node
#           drains with reason "Prolog error", hooks.log names elasticd's reason (the unknown
#           key), the job's script never runs; the test cancels it and resumes the node.
#
# usage: slurm_elastic_test.sh ELASTICD ELASTICCTL TRAINER SOURCE_DIR
#   TRAINER may be "" (then $ELASTIC_TEST_TRAINER). Exit 77 (ctest SKIP_RETURN_CODE) with the
#   reason when not root, Slurm/munge/iproute2 are missing, no trainer or no Fashion-MNIST.
# Environment: ESL_KEEP=1 keeps the work dir (logs) after a pass; it is always kept on failure.
set -uo pipefail
elasticd=${1:?elasticd}
elasticctl=${2:?elasticctl}
trainer=${3:-${ELASTIC_TEST_TRAINER:-}}
src=${4:?source dir}
data=/usr/share/datasets/fashion-mnist
t0=$(date +%s.%N)

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, slurmd as root)"
for b in slurmctld slurmd munged munge unmunge scontrol sbatch squeue sinfo scancel ip nsenter \
  unshare setsid setpriv mknod python3; do
  command -v "$b" >/dev/null 2>&1 || skip "$b is not installed (apt-get install slurmctld slurmd slurm-client munge)"
done
if [ -z "$trainer" ] || [ ! -x "$trainer" ]; then
  skip "no elastic-trainer (build the trainer or set ELASTIC_TEST_TRAINER)"
fi
if [ ! -x "$elasticd" ] || [ ! -x "$elasticctl" ]; then skip "elasticd/elasticctl not built"; fi
[ -r "$data/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)"

D=$(mktemp -d /tmp/esl-XXXXXX)
chmod 755 "$D"
N=3
export PREFIX=esl$$
PREFIX=${PREFIX:0:6}
export NET=10.231.86 CTLD_PORT=26817 SLURMD_PORT=26818 PROLOG_TIMEOUT=40
export SLURM_CONF=$D/etc/slurm.conf
here=$(cd "$(dirname "$0")" && pwd)
status=1

ts() { python3 -c 'import sys,time; print(f"[slurm-test {time.time()-float(sys.argv[1]):6.1f}s] {sys.argv[2]}")' "$t0" "$*"; }
fail() {
  echo "FAIL: $*" >&2
  for f in "$D"/nodes/*/log/job-*/hooks.log; do
    [ -f "$f" ] && { echo "---- $f" >&2; tail -n 20 "$f" >&2; }
  done
  for f in "$D"/nodes/*/log/job-*/elasticd.log; do
    [ -f "$f" ] && { echo "---- $f (tail)" >&2; tail -n 15 "$f" >&2; }
  done
  for f in "$D"/out/*; do [ -f "$f" ] && { echo "---- $f" >&2; tail -n 30 "$f" >&2; }; done
  echo "---- slurmctld.log (errors)" >&2
  grep -i 'error' "$D/log/slurmctld.log" 2>/dev/null | grep -v pmix | tail -n 10 >&2
  exit 1
}
# wait_for SECONDS WHAT CMD...: poll CMD until it succeeds; fail at the deadline.
wait_for() {
  local limit=$1 what=$2 end
  shift 2
  end=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}
# The pids of processes whose environment holds an entry starting with PREFIX (exact prefix).
pids_with_env() {
  local e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = $$ ] && continue
    if tr '\0' '\n' 2>/dev/null <"$e" | grep -qF -- "$1"; then
      grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null || echo "$p"
    fi
  done
}

daemon_pids=""  # every elasticd pid the prologs recorded (read from their pid files)
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ $status = 0 ] || rc=1
  # The cluster first (it cancels jobs: their epilogs stop the daemons), then anything of ours
  # that is still alive, by the pids the prologs recorded and the markers only our dir carries.
  "$here/cluster-down.sh" "$D" "$N"
  local p
  for p in $daemon_pids $(pids_with_env "ELASTIC_SLURM_ALLOCATION=$D/") \
    $(pids_with_env "ELASTIC_CONTROL_SOCKET=$D/"); do
    if kill -0 "$p" 2>/dev/null; then
      echo "cleanup: killing leftover pid $p: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" >&2
      kill -KILL "$p" 2>/dev/null
    fi
  done
  if [ "$rc" = 0 ] && [ -z "${ESL_KEEP:-}" ]; then
    rm -rf "$D"
  else
    echo "work dir kept: $D" >&2
  fi
  ts "done (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the hooks: slurm/*.sh through wrappers that name this test's site settings
mkdir -p "$D/hooks" "$D/out" "$D/ck"
chmod 1777 "$D/out" "$D/ck"
for role in prolog epilog taskprolog; do
  printf '#!/bin/sh\nELASTIC_SLURM_CONF=%s/elastic-slurm.conf\nexport ELASTIC_SLURM_CONF\nexec /bin/sh %s/slurm/%s.sh "$@"\n' \
    "$D" "$src" "$role" >"$D/hooks/$role.sh"
  chmod 755 "$D/hooks/$role.sh"
done
# The base config: every key at the default of the elasticd under test (conf/elasticd.toml
# holds the same values, but may be ahead of or behind a binary built elsewhere).
"$elasticd" -c '' --print-config >"$D/elasticd.toml" || fail "elasticd --print-config failed"
printf '[node]\nnmae = "typo"\n' >"$D/broken.toml"
# CURVE keys, made once per node as an admin would (elastic-slurm.conf): the secret keys in
# $D/keys/<node>.key (the site conf names them with %n, the nodes share this filesystem) and
# every node's public key in the allow-list $D/public_keys.
mkdir -p "$D/public_keys"
chmod 0755 "$D/public_keys"
for i in $(seq 1 "$N"); do
  "$elasticctl" -c '' keygen --dir "$D/keys" --name "n$i" >/dev/null || fail "elasticctl keygen n$i failed"
  cp "$D/keys/n$i.pub" "$D/public_keys/n$i.pub"
done
site_conf() {  # BASE_CONFIG
  cat >"$D/elastic-slurm.conf" <<CONF
ELASTICD=$elasticd
ELASTICCTL=$elasticctl
ELASTIC_SLURM_BASE_CONFIG=$1
ELASTIC_SLURM_PORT_BASE=27100
ELASTIC_SLURM_PORT_RANGE=100
ELASTIC_SLURM_STATE_DIR=$D/nodes/%n/state/job-%j
ELASTIC_SLURM_SOCKET=$D/nodes/%n/run/slurm-%j.sock
ELASTIC_SLURM_LOG_DIR=$D/nodes/%n/log/job-%j
ELASTIC_SLURM_START_TIMEOUT=30
ELASTIC_SLURM_STOP_TIMEOUT=20
ELASTIC_SLURM_SECRET_KEY=$D/keys/%n.key
ELASTIC_SLURM_PUBLIC_KEYS_DIR=$D/public_keys
CONF
}
site_conf "$D/elasticd.toml"

"$here/cluster-up.sh" "$D" "$N" "$D/hooks" || fail "the Slurm cluster did not come up"
ts "Slurm up: 3 slurmd in namespaces $PREFIX-n1..n3, 4 fake GPUs each"

# ---- case 1: an elastic job in a 3-node allocation survives the loss of one node's daemon
cat >"$D/job.sbatch" <<JOB
#!/bin/sh
#SBATCH -N 3
#SBATCH --gres=gpu:2
#SBATCH -o $D/out/job-%j.out
# The TaskProlog exported the socket of this node's daemon for the allocation.
echo "ELASTIC_CONTROL_SOCKET=\$ELASTIC_CONTROL_SOCKET"
$elasticctl submit $src/examples/fmnist.toml --wait \\
  --nodes \$((SLURM_NNODES - 1)):\$SLURM_NNODES --checkpoint-root $D/ck --last-call 1s -- \\
  $trainer --model fmnist --data-dir $data --threads 1 --batch-size 32 --epochs 1 \\
  --train-limit ${ESL_TRAIN_LIMIT:-24000} --test-limit 500 --checkpoint-interval 5 --log-interval 1
rc=\$?
echo "elasticctl exit status \$rc"
exit \$rc
JOB
job=$(sbatch --parsable "$D/job.sbatch") || fail "sbatch refused the job"
ts "Slurm job $job submitted (sbatch -N3 --gres=gpu:2)"

sock() { echo "$D/nodes/$1/run/slurm-$job.sock"; }
ctl() { "$elasticctl" -c '' --set "control.socket=$(sock "$1")" "${@:2}"; }
finished() { case $(state_of) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) return 0 ;; esac; return 1; }
state_of() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# job_json FIELD-EXPRESSION: evaluate a Python expression over the elastic job j (n1's view).
ejob=""
job_py() {
  ctl n1 status "$ejob" --json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); j=d.get("job",d); print(eval(sys.argv[1]))' "$1"
}
running_on() { [ "$(job_py 'j["state"]+":"+str(len(j.get("ranks",[])))')" = "running:$1" ]; }

script_started() {
  local drained
  drained=$(sinfo -h -N -t drain,draining -o '%N %E' 2>/dev/null)
  [ -z "$drained" ] || fail "a prolog failed (drained: $drained)"
  [ -s "$D/out/job-$job.out" ]
}
wait_for 60 "the batch script to start (all prologs done)" script_started
ts "prologs done on n1..n3, batch script running"
for n in n1 n2 n3; do
  a=$D/nodes/$n/state/job-$job/allocation
  [ -f "$a" ] || fail "no allocation file $a"
  grep -qx "slurm_job_gpus=0,1" "$a" || fail "$a does not record SLURM_JOB_GPUS=0,1: $(cat "$a")"
  grep -qx "daemon_gpus=" "$a" || fail "$a hands the fake GPUs to the daemon: $(cat "$a")"
  grep -qx "cluster_id=slurm-$job" "$a" || fail "$a: wrong cluster id"
  p=$(cat "$D/nodes/$n/state/job-$job/elasticd.pid")
  daemon_pids="$daemon_pids $p"
done
grep -qx "ELASTIC_CONTROL_SOCKET=$(sock n1)" "$D/out/job-$job.out" ||
  fail "the TaskProlog did not export ELASTIC_CONTROL_SOCKET: $(head -n1 "$D/out/job-$job.out")"

# A prolog run again for the same allocation (as after a requeue) joins the running daemon.
p2=$(cat "$D/nodes/n2/state/job-$job/elasticd.pid")
nsenter --net="/run/netns/$PREFIX-n2" env -i SLURM_JOB_ID="$job" SLURMD_NODENAME=n2 \
  SLURM_NODELIST='n[1-3]' SLURM_CONF="$SLURM_CONF" SLURM_JOB_GPUS=0,1 SLURM_JOB_UID=0 \
  SLURM_JOB_GID=0 SLURM_JOB_USER=root "$D/hooks/prolog.sh" || fail "the re-run prolog failed"
grep -q "prolog job=$job node=n2: reused elasticd pid $p2 " "$D/nodes/n2/log/job-$job/hooks.log" ||
  fail "the re-run prolog did not reuse elasticd pid $p2: $(tail -n 2 "$D/nodes/n2/log/job-$job/hooks.log")"
[ "$(cat "$D/nodes/n2/state/job-$job/elasticd.pid")" = "$p2" ] || fail "the re-run prolog replaced the daemon"
ts "a re-run prolog on n2 reused elasticd pid $p2"
# elasticctl: ELASTIC_CONTROL_SOCKET (the batch script above relies on it) yields to --set.
ELASTIC_CONTROL_SOCKET=$D/no-such.sock ctl n1 status >/dev/null ||
  fail "--set control.socket did not win over ELASTIC_CONTROL_SOCKET"
# The allocation's daemon serves its owner (root here) only: another user is refused.
setpriv --reuid=65534 --regid=65534 --clear-groups \
  "$elasticctl" -c '' --set "control.socket=$(sock n1)" status >/dev/null 2>&1
rc=$?
[ $rc = 77 ] || fail "user nobody reached the allocation's daemon (elasticctl exit status $rc, not 77)"

has_job() { ejob=$(ctl n1 jobs --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["jobs"][0]["id"])'); [ -n "$ejob" ]; }
wait_for 30 "the elastic job in the leader's table" has_job
wait_for 60 "$ejob to run on 3 nodes" running_on 3
round1=$(job_py 'j["round"]')
# The victim: not the first node (the others' seed) and not the Raft leader (recovery then
# needs no election; losing the leader is covered by the netns tests).
leader=$(ctl n1 status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["consensus"]["leader"])')
victim=n3
[ "$leader" = n3 ] && victim=n2
vpid=$(cat "$D/nodes/$victim/state/job-$job/elasticd.pid")
# The job is long enough (250 steps per rank) that the kill lands mid-training even when this
# poll is slow: with 84 steps, a loaded machine saw the first checkpoint at step 60 and killed
# the victim as the survivors finished their epoch, so they had nothing left to re-form for.
wait_for 60 "a checkpoint of $ejob" test -s "$D/ck/$ejob/LATEST"
ts "$ejob trains on 3 nodes (round $round1), checkpoint $(cat "$D/ck/$ejob/LATEST")"
kill -KILL "$vpid" || fail "cannot kill elasticd pid $vpid on $victim"
ts "kill -9 of elasticd on $victim (pid $vpid; Raft leader $leader)"
# Recovered: a later round on 2 nodes (or already the end of the Slurm job: on a fast machine
# the short job may finish between two polls; the batch output is checked below either way).
recovered() {
  finished && return 0
  running_on 2 && [ "$(job_py 'j["round"]')" -gt "$round1" ]
}
wait_for 60 "$ejob to recover on the 2 survivors" recovered
ts "$ejob recovered on 2 nodes"

wait_for 180 "Slurm job $job to end" finished
st=$(state_of)
ec=$(scontrol show job "$job" | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2)
if [ "$st" != COMPLETED ] || [ "$ec" != 0:0 ]; then
  fail "Slurm job $job ended $st with exit code $ec: $(cat "$D/out/job-$job.out")"
fi
grep -q "elasticctl exit status 0" "$D/out/job-$job.out" || fail "elasticctl did not exit 0"
grep -q "^$ejob: running (round 1, 3 nodes)" "$D/out/job-$job.out" || fail "$ejob never ran on 3 nodes"
grep -q "^$ejob: succeeded (round [0-9]*, 2 nodes)" "$D/out/job-$job.out" ||
  fail "$ejob did not finish on the 2 survivors: $(tail -n 3 "$D/out/job-$job.out")"
# The survivors re-form in place (elastic-trainer's default): their state stays in memory, no
# checkpoint is read.
reformed=$(cat "$D"/nodes/*/log/job-"$job"/workers/"$ejob"/round-*/rank-*.log 2>/dev/null | grep -c '"event":"reform"')
[ "$reformed" -ge 2 ] || fail "the 2 survivors did not re-form in place ($reformed reform lines)"
ts "Slurm job $job COMPLETED, exit code 0:0 ($ejob succeeded; $reformed rank(s) re-formed in place)"

all_idle() { [ "$(sinfo -h -N -o '%T' | grep -cx idle)" -eq $N ]; }
wait_for 60 "every node back to idle (epilogs done)" all_idle
for n in n1 n2 n3; do
  grep -q "epilog job=$job node=$n: done" "$D/nodes/$n/log/job-$job/hooks.log" ||
    fail "no completed epilog on $n: $(tail -n 5 "$D/nodes/$n/log/job-$job/hooks.log")"
  [ ! -e "$D/nodes/$n/state/job-$job" ] || fail "the state dir of $n is left"
  [ ! -e "$(sock "$n")" ] || fail "the control socket of $n is left"
  ls "$D/nodes/$n/log/job-$job/workers/$ejob"/round-*/rank-*.log >/dev/null 2>&1 ||
    [ "$n" = "$victim" ] || fail "no worker log kept on $n"
done
for p in $daemon_pids; do
  [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" && fail "elasticd pid $p still runs"
done
left=$(pids_with_env "ELASTIC_SLURM_ALLOCATION=$D/"; pids_with_env "ELASTIC_CONTROL_SOCKET=$D/")
[ -z "$left" ] || fail "processes of the allocation are left: $left"
grep -q "elasticd pid $vpid of this allocation was no longer running" \
  "$D/nodes/$victim/log/job-$job/hooks.log" || fail "the epilog on $victim did not notice the dead daemon"
ts "epilogs ran on n1..n3: no daemon or worker left, runtime files gone, logs kept, nodes idle"
# Sanitizer builds: the daemons' reports end up in their logs (stderr).
if grep -l 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:\|WARNING: ThreadSanitizer' \
  "$D"/nodes/*/log/job-"$job"/elasticd.log; then
  fail "a sanitizer reported an error in an elasticd log (above)"
fi

# ---- case 2: a prolog failure drains the node with a clear reason
site_conf "$D/broken.toml"
job2=$(sbatch --parsable -N1 -w n2 -o "$D/out/fail-%j.out" --wrap 'echo the script ran') ||
  fail "sbatch refused the second job"
drained() { scontrol show node n2 | grep -q 'Reason=Prolog error'; }
wait_for 60 "n2 to drain with reason 'Prolog error'" drained
hooks=$D/nodes/n2/log/job-$job2/hooks.log
grep -q "prolog job=$job2 node=n2: FAILED: elasticd rejects its configuration (exit status 78.*node.nmae: unknown key" "$hooks" ||
  fail "the prolog's log does not name the cause: $(cat "$hooks" 2>/dev/null)"
grep -q "elastic prolog: job $job2 on n2: elasticd rejects its configuration" "$D/log/slurmd-n2.log" ||
  echo "note: slurmd's log does not show the prolog's message"
[ ! -e "$D/out/fail-$job2.out" ] || fail "the job's script ran although its prolog failed"
ts "prolog failure: n2 drained ('Prolog error'), hooks.log: $(grep -o 'node.nmae: unknown key[^(]*' "$hooks" | head -n1)"
scancel "$job2"
site_conf "$D/elasticd.toml"
scontrol update nodename=n2 state=resume || fail "cannot resume n2"
wait_for 60 "every node back to idle after the resume" all_idle
[ -z "$(pids_with_env "ELASTIC_SLURM_ALLOCATION=$D/")" ] || fail "a daemon of job $job2 is left"
ts "job $job2 cancelled, n2 resumed and idle"
status=0
