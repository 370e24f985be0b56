#!/bin/sh
# prolog.sh: slurmd Prolog (slurm.conf: Prolog=<libexec>/elastic/slurm/prolog.sh, with
# PrologFlags=Alloc so it runs on every node when the allocation is made).
#
# Starts this node's elasticd for the allocation, or joins the one already running (a re-run
# prolog, a requeue), and waits until it answers on its control socket and has joined the
# allocation's first node. Records the allocation (job id, user, nodes, GPUs, pid) in
# <state dir>/allocation for the epilog and for people.
#
# One daemon per node per allocation: cluster id slurm-<jobid>, node name SLURMD_NODENAME,
# transport port PORT_BASE + jobid mod PORT_RANGE on every node, seed = the allocation's first
# node, Raft voters = its first min(VOTERS, N) nodes. Settings: elastic-slurm.conf.
#
# Exit status: 0 when the daemon serves (or this job is not for elastic); 1 when this node
# cannot serve it (binary missing, configuration rejected, daemon did not come up): slurmd then
# drains the node with "Prolog error". The reason is on stderr and in <log dir>/hooks.log.
#
# Traps this avoids (research/slurm-recipe.md): no PATH/HOME in our environment; the node list
# is SLURM_NODELIST; a child that keeps our stdout delays the job until PrologEpilogTimeout; a
# child left in our process group is killed when we exit; exiting before the child has called
# setsid() races with that kill; a job that starts before the daemon listens gets "connection
# refused".
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022
here=$(cd "$(dirname "$0")" && pwd -P) || exit 1
. "$here/lib.sh"
es_init prolog || exit 1

es_elastic_partition || exit 0  # not an elastic partition: nothing to do, not an error

# ---- the directories (the log dir first: every later failure is written there)
mkdir -p "$ES_LOG_DIR" || es_fail "cannot create the log directory $ES_LOG_DIR"
# The job's group may read the logs (the daemon writes worker logs 0644 inside).
chgrp "${SLURM_JOB_GID:-0}" "$ES_LOG_DIR" 2>/dev/null || true
chmod 0750 "$ES_LOG_DIR" 2>/dev/null || true
mkdir -p "$ES_STATE_DIR" || es_fail "cannot create the state directory $ES_STATE_DIR"
mkdir -p "$(dirname "$ES_SOCKET")" || es_fail "cannot create the directory of $ES_SOCKET"
[ ${#ES_SOCKET} -lt 108 ] ||
  es_fail "the control socket path $ES_SOCKET is longer than 107 bytes (ELASTIC_SLURM_SOCKET)"
[ -x "$ELASTICD" ] || es_fail "elasticd is not installed at $ELASTICD (ELASTICD in $ES_CONF)"
[ -x "$ELASTICCTL" ] || es_fail "elasticctl is not installed at $ELASTICCTL (ELASTICCTL in $ES_CONF)"

# ---- the allocation: nodes, seed, voters, address, GPUs
nodes=$(scontrol show hostnames "${SLURM_NODELIST:-${SLURM_JOB_NODELIST:-}}" 2>&1) ||
  es_fail "scontrol show hostnames '${SLURM_NODELIST:-}' failed: $nodes"
[ -n "$nodes" ] || es_fail "the job's node list SLURM_NODELIST is empty"
node_count=$(printf '%s\n' "$nodes" | wc -l)
first=$(printf '%s\n' "$nodes" | head -n1)
voters=$(printf '%s\n' "$nodes" | head -n "$ELASTIC_SLURM_VOTERS" |
  sed 's/.*/"&"/' | paste -sd, -)
if [ "$ES_NODE" = "$first" ]; then
  seeds=''  # the first node starts the cluster; the others join it
else
  seed_addr=$(es_node_addr "$first")
  seeds="\"$first@$seed_addr:$ES_PORT\""
fi
bind=$ELASTIC_SLURM_BIND_ADDR
[ -n "$bind" ] || bind=$(es_node_addr "$ES_NODE")

slurm_gpus=${SLURM_JOB_GPUS:-}
case $ELASTIC_SLURM_GPUS in
  auto) if [ -e /dev/nvidiactl ]; then gpus=$slurm_gpus; else gpus=''; fi ;;
  slurm) gpus=$slurm_gpus ;;
  none) gpus='' ;;
  *) es_fail "ELASTIC_SLURM_GPUS='$ELASTIC_SLURM_GPUS' in $ES_CONF is not auto, slurm or none" ;;
esac
case $gpus in *[!0-9,]*) es_fail "SLURM_JOB_GPUS '$gpus' is not a list of GPU indices" ;; esac

# ---- the daemon's command line: the base config, then the allocation's settings
set -- -c "$ELASTIC_SLURM_BASE_CONFIG"
# Site extras first: the allocation's own settings below must win over them.
if [ -n "$ELASTIC_SLURM_SET" ]; then
  while IFS= read -r line; do
    [ -n "$line" ] && set -- "$@" --set "$line"
  done <<EOF
$ELASTIC_SLURM_SET
EOF
fi
set -- "$@" \
  --set "node.name=$ES_NODE" \
  --set "node.cluster_id=$ES_CLUSTER" \
  --set "node.state_dir=$ES_STATE_DIR" \
  --set "node.gpus=[$gpus]" \
  --set "transport.bind=tcp://$bind:$ES_PORT" \
  --set "membership.seeds=[$seeds]" \
  --set "consensus.voters=[$voters]" \
  --set "control.socket=$ES_SOCKET" \
  --set "spawner.log_dir=$ES_LOG_DIR/workers"
# The node's CURVE keys, made once by the admin (elastic-slurm.conf); else the base config's.
if [ -n "$ELASTIC_SLURM_SECRET_KEY" ]; then
  set -- "$@" --set "transport.secret_key_file=$(es_expand "$ELASTIC_SLURM_SECRET_KEY")"
fi
if [ -n "$ELASTIC_SLURM_PUBLIC_KEYS_DIR" ]; then
  set -- "$@" --set "transport.public_keys_dir=$(es_expand "$ELASTIC_SLURM_PUBLIC_KEYS_DIR")"
fi

# The daemon makes its socket 0666 (every user of a shared host may submit). The allocation's
# daemon serves the allocation's owner only: other users on a shared node must not place work
# on this allocation's resources. Root (the epilog, admins) still connects.
restrict_socket() {
  if ! chown "${SLURM_JOB_UID:-0}:${SLURM_JOB_GID:-0}" "$ES_SOCKET" ||
    ! chmod 0600 "$ES_SOCKET"; then
    es_fail "cannot restrict the control socket $ES_SOCKET to the job's user"
  fi
}

write_allocation() {  # pid
  tmp=$ES_ALLOCATION_FILE.tmp
  {
    echo "# elastic allocation of Slurm job $ES_JOB on $ES_NODE (written by the prolog)"
    echo "job_id=$ES_JOB"
    echo "user=${SLURM_JOB_USER:-}"
    echo "uid=${SLURM_JOB_UID:-}"
    echo "gid=${SLURM_JOB_GID:-}"
    echo "partition=${SLURM_JOB_PARTITION:-}"
    echo "node=$ES_NODE"
    echo "nodes=$(printf '%s\n' "$nodes" | paste -sd, -)"
    echo "node_count=$node_count"
    echo "first_node=$first"
    echo "slurm_job_gpus=$slurm_gpus"
    echo "daemon_gpus=$gpus"
    echo "cluster_id=$ES_CLUSTER"
    echo "transport=tcp://$bind:$ES_PORT"
    echo "control_socket=$ES_SOCKET"
    echo "state_dir=$ES_STATE_DIR"
    echo "log_dir=$ES_LOG_DIR"
    echo "daemon_pid=$1"
    echo "restart_count=${SLURM_JOB_RESTART_COUNT:-0}"
    echo "started=$(es_now)"
  } >"$tmp" || es_fail "cannot write the allocation file $tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$ES_ALLOCATION_FILE" || es_fail "cannot write the allocation file $ES_ALLOCATION_FILE"
}

# joined: the daemon answers; a node other than the first also sees the first one alive.
joined() {
  table=$(es_ctl nodes 2>/dev/null) || return 1
  [ "$ES_NODE" = "$first" ] && return 0
  printf '%s\n' "$table" | awk -v n="$first" '$1 == n && $2 == "alive" { ok = 1 } END { exit !ok }'
}

deadline=$(($(date +%s) + ELASTIC_SLURM_START_TIMEOUT))
wait_joined() {  # pid: 0 joined; 1 the daemon exited (rc in daemon_rc); 2 timeout
  while :; do
    if ! es_alive "$1"; then
      daemon_rc=unknown
      if [ "${2:-}" = child ]; then
        wait "$1"
        daemon_rc=$?
      fi
      return 1
    fi
    joined && return 0
    [ "$(date +%s)" -lt "$deadline" ] || return 2
    sleep 0.2
  done
}

# ---- join a daemon already running for this allocation (a re-run prolog, a requeue)
pid=$(es_daemon_pid)
if [ -n "$pid" ]; then
  es_log "elasticd pid $pid already runs for this allocation; reusing it"
  wait_joined "$pid"
  case $? in
    0)
      restrict_socket
      write_allocation "$pid"
      es_log "reused elasticd pid $pid (cluster $ES_CLUSTER, socket $ES_SOCKET)"
      exit 0
      ;;
    1) es_log "elasticd pid $pid exited while being checked; starting a new one" ;;
    2)
      # It runs but does not answer: it cannot serve this job. Replace it.
      es_log "elasticd pid $pid does not answer on $ES_SOCKET; replacing it"
      kill -KILL "$pid" 2>/dev/null
      deadline=$(($(date +%s) + ELASTIC_SLURM_START_TIMEOUT))
      ;;
  esac
fi

# ---- check the configuration first: a bad one is reported with elasticd's own sentence
check=$("$ELASTICD" "$@" --check-config 2>&1 </dev/null)
rc=$?
if [ $rc -ne 0 ]; then
  es_fail "elasticd rejects its configuration (exit status $rc; base config" \
    "$ELASTIC_SLURM_BASE_CONFIG): $(printf '%s' "$check" | tr '\n' ' ')"
fi

# ---- start it fully detached: new session, no inherited descriptors, a clean environment
rm -f "$ES_SOCKET"
echo "---- $(es_now) prolog of job $ES_JOB starts elasticd" >>"$ES_LOG_DIR/elasticd.log"
env -i PATH="$PATH" LANG=C.UTF-8 "$ES_MARKER" \
  setsid "$ELASTICD" "$@" >>"$ES_LOG_DIR/elasticd.log" 2>&1 </dev/null &
pid=$!
# A background child of a non-interactive shell is not a process group leader, so setsid
# execs in place: $! is the daemon itself.
echo "$pid" >"$ES_PID_FILE" || es_fail "cannot write $ES_PID_FILE"
es_log "started elasticd pid $pid: cluster $ES_CLUSTER, transport tcp://$bind:$ES_PORT," \
  "seeds [$seeds], voters [$voters], gpus [$gpus], socket $ES_SOCKET"
wait_joined "$pid" child
case $? in
  0) ;;
  1)
    es_fail "elasticd pid $pid exited with status $daemon_rc before it answered;" \
      "its log $ES_LOG_DIR/elasticd.log ends: $(tail -n 5 "$ES_LOG_DIR/elasticd.log" | tr '\n' ' ')"
    ;;
  2)
    kill -KILL "$pid" 2>/dev/null
    if [ "$ES_NODE" = "$first" ]; then
      why="did not answer on $ES_SOCKET"
    else
      why="did not join the first node $first at $seeds"
    fi
    es_fail "elasticd pid $pid $why within ${ELASTIC_SLURM_START_TIMEOUT}s" \
      "(ELASTIC_SLURM_START_TIMEOUT); stopped it; see $ES_LOG_DIR/elasticd.log"
    ;;
esac
restrict_socket
write_allocation "$pid"
if [ "$ES_NODE" = "$first" ]; then
  es_log "elasticd pid $pid answers on $ES_SOCKET (the first node: the others join it)"
else
  es_log "elasticd pid $pid answers on $ES_SOCKET and has joined $first"
fi
exit 0
