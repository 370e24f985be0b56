#!/bin/sh
# cluster-down.sh: tear down what cluster-up.sh started, by recorded pid only, whatever state
# it reached (safe to run after a partial cluster-up, and twice).
# usage: cluster-down.sh DIR N   (environment: PREFIX as for cluster-up.sh)
# 1. cancel the jobs (slurmstepd is no child of slurmd) and wait for their epilogs;
# 2. slurmd and slurmctld together (no job is left to re-register for), then munged:
#    SIGTERM, SIGKILL after 15 s;
# 3. the namespaces, veths and the bridge;
# 4. report (on stderr) any process still carrying this cluster's SLURM_CONF.
D=$1
N=$2
PREFIX=${PREFIX:-esl}
export SLURM_CONF="$D/etc/slurm.conf"

stop() { # stop PIDFILE...
  _ps=""
  for _f in "$@"; do
    [ -f "$_f" ] || continue
    _p=$(cat "$_f"); rm -f "$_f"
    kill -0 "$_p" 2>/dev/null && { kill -TERM "$_p"; _ps="$_ps $_p"; }
  done
  for _i in $(seq 150); do
    _alive=""
    for _p in $_ps; do kill -0 "$_p" 2>/dev/null && _alive="$_alive $_p"; done
    [ -z "$_alive" ] && return 0
    sleep 0.1
  done
  for _p in $_alive; do echo "cluster-down: SIGKILL $_p" >&2; kill -KILL "$_p"; done
}

if [ -f "$D/run/slurmctld.pid" ] && scontrol ping >/dev/null 2>&1; then
  jobs=$(squeue -h -o %i 2>/dev/null)
  # shellcheck disable=SC2086
  [ -n "$jobs" ] && scancel --quiet $jobs 2>/dev/null
  for _i in $(seq 300); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] &&
      ! sinfo -h -N -o '%T' 2>/dev/null | grep -q 'completing' && break
    sleep 0.1
  done
fi
# shellcheck disable=SC2046  # the paths have no spaces (DIR is a mktemp name)
stop $(for k in $(seq 1 "$N"); do echo "$D/run/slurmd-n$k.pid"; done) "$D/run/slurmctld.pid"
stop "$D/run/munged.pid"
for k in $(seq 1 "$N"); do
  ip netns del "$PREFIX-n$k" 2>/dev/null
  ip link del "${PREFIX}${k}h" 2>/dev/null
done
ip link del "${PREFIX}b0" 2>/dev/null
for e in /proc/[0-9]*/environ; do
  p=${e#/proc/}; p=${p%/environ}
  [ "$p" = "$$" ] && continue
  { tr '\0' '\n' <"$e" | grep -qxF "SLURM_CONF=$SLURM_CONF"; } 2>/dev/null &&
    echo "cluster-down: leftover pid $p: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" >&2
done
true
