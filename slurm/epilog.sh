#!/bin/sh
# epilog.sh: slurmd Epilog (slurm.conf: Epilog=<libexec>/elastic/slurm/epilog.sh).
#
# Ends this node's share of the allocation's elastic cluster and checks that nothing is left:
#   1. SIGTERM to the allocation's elasticd (the pid the prolog recorded, after checking that
#      /proc/<pid> is that daemon: its environment carries the allocation marker); it stops its
#      workers (TERM, then KILL after spawner.stop_grace) and leaves the cluster. SIGKILL after
#      ELASTIC_SLURM_STOP_TIMEOUT seconds.
#   2. Leftover workers: the daemon's records <state dir>/workers/<pid> ("<pgid> <start time>",
#      left behind when the daemon was killed hard) whose process still runs with the same
#      start time, and every process whose environment carries this allocation's
#      ELASTIC_CONTROL_SOCKET (set by the daemon for each worker, inherited by their children)
#      or the daemon's marker: SIGKILL by pid (the record's process group too), said in hooks.log.
#   3. GPUs: when nvidia-smi exists, no compute process may remain on SLURM_JOB_GPUS.
#   4. The runtime files (state dir, socket) are removed; the logs stay in the log dir.
#
# Exit status: 0 unless the node is unfit for the next job: a process of the allocation that
# survives SIGKILL, or a GPU of the job still busy. Then 1, and slurmd drains the node with
# "Epilog error"; the reason is on stderr and in <log dir>/hooks.log.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022
here=$(cd "$(dirname "$0")" && pwd -P) || exit 1
. "$here/lib.sh"
es_init epilog || exit 1

es_elastic_partition || exit 0
# The prolog may have failed before it made the log dir; the epilog's own lines still count.
mkdir -p "$ES_LOG_DIR" 2>/dev/null || true
unfit=''

# wait_gone SECONDS PID...: 0 once none of them is alive; 1 at the deadline.
wait_gone() {
  end=$(($(date +%s) + $1))
  shift
  while :; do
    alive=''
    for q in "$@"; do es_alive "$q" && alive="$alive $q"; done
    [ -z "$alive" ] && return 0
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.1
  done
}

# ---- 1. the daemon
pid=$(es_daemon_pid)
if [ -n "$pid" ]; then
  kill -TERM "$pid" 2>/dev/null
  if wait_gone "$ELASTIC_SLURM_STOP_TIMEOUT" "$pid"; then
    es_log "elasticd pid $pid stopped after SIGTERM"
  else
    es_log "elasticd pid $pid still ran ${ELASTIC_SLURM_STOP_TIMEOUT}s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null
    wait_gone 5 "$pid" || unfit="$unfit elasticd pid $pid survives SIGKILL;"
  fi
elif [ -r "$ES_PID_FILE" ]; then
  es_log "elasticd pid $(head -n1 "$ES_PID_FILE") of this allocation was no longer running"
fi

# ---- 2. leftover workers: the daemon's records, then the /proc scan
killed=''
if [ -d "$ES_STATE_DIR/workers" ]; then
  for rec in "$ES_STATE_DIR"/workers/*; do
    [ -f "$rec" ] || continue
    w=${rec##*/}
    es_is_uint "$w" || continue
    read -r pgid start <"$rec" 2>/dev/null || continue
    es_alive "$w" || continue
    now_start=$(sed -e 's/^.*) //' "/proc/$w/stat" 2>/dev/null | cut -d' ' -f20)
    [ "$now_start" = "$start" ] || continue  # the pid was reused: not ours
    es_log "worker pid $w (process group $pgid) outlived its daemon: SIGKILL"
    es_is_uint "$pgid" && [ "$pgid" -gt 1 ] && kill -KILL -- "-$pgid" 2>/dev/null
    kill -KILL "$w" 2>/dev/null
    killed="$killed $w"
  done
fi
for p in $(es_allocation_pids); do
  es_log "process $p ($(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-120))" \
    "of this allocation was still running: SIGKILL"
  kill -KILL "$p" 2>/dev/null
  killed="$killed $p"
done
# shellcheck disable=SC2086
if [ -n "$killed" ] && ! wait_gone 5 $killed; then
  unfit="$unfit processes$alive of this allocation survive SIGKILL;"
fi
left=$(es_allocation_pids | paste -sd' ' -)
[ -n "$left" ] && unfit="$unfit processes $left of this allocation are still running;"

# ---- 3. the job's GPUs must be idle
gpus=${SLURM_JOB_GPUS:-}
if [ -n "$gpus" ] && command -v nvidia-smi >/dev/null 2>&1 && [ -e /dev/nvidiactl ]; then
  end=$(($(date +%s) + ELASTIC_SLURM_GPU_IDLE_TIMEOUT))
  while :; do
    busy=$(nvidia-smi -i "$gpus" --query-compute-apps=pid,process_name \
      --format=csv,noheader 2>/dev/null | paste -sd';' -)
    [ -z "$busy" ] && break
    if [ "$(date +%s)" -ge "$end" ]; then
      unfit="$unfit GPU(s) $gpus still run compute processes ($busy) after ${ELASTIC_SLURM_GPU_IDLE_TIMEOUT}s;"
      break
    fi
    sleep 0.5
  done
fi

# ---- 4. runtime files (the logs stay)
rm -f "$ES_SOCKET"
case $ES_STATE_DIR in
  '' | / | /var | /var/lib | /tmp | /run) es_log "refusing to remove the state dir '$ES_STATE_DIR'" ;;
  *) rm -rf "$ES_STATE_DIR" ;;
esac
[ -e "$ES_STATE_DIR" ] && es_log "could not remove the state dir $ES_STATE_DIR"

if [ -n "$unfit" ]; then
  es_fail "the node is unfit:$unfit see $ES_LOG_DIR"
fi
es_log "done: nothing of the allocation is left; logs kept in $ES_LOG_DIR"
exit 0
