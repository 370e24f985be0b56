# shellcheck shell=sh disable=SC2034  # the names set here are used by the hooks that source it
# lib.sh: what the elastic Slurm hooks (prolog.sh, epilog.sh, taskprolog.sh) share. Sourced,
# never run; POSIX sh (dash). See README.md in this directory for the design.
#
# Contract: es_init loads the site settings (ELASTIC_SLURM_CONF, default
# /etc/elastic/elastic-slurm.conf) over the built-in defaults and computes the allocation's
# names and paths from the Slurm variables of the hook's environment (SLURM_JOB_ID,
# SLURMD_NODENAME). It never starts or stops anything. es_log writes one line to the
# allocation's hooks.log; es_fail also to stderr (slurmd's log), then exits 1.
#
# The hooks run as root with a minimal environment (no PATH, HOME or USER: the callers set
# PATH before sourcing this) except the TaskProlog, which runs as the job's user.

ES_DEFAULT_CONF=/etc/elastic/elastic-slurm.conf

# es_defaults: the built-in settings; slurm/elastic-slurm.conf documents each one.
es_defaults() {
  ELASTICD=/usr/local/sbin/elasticd
  ELASTICCTL=/usr/local/bin/elasticctl
  ELASTIC_SLURM_BASE_CONFIG=/etc/elastic/elasticd.toml
  ELASTIC_SLURM_SET=''
  ELASTIC_SLURM_PARTITIONS=''
  ELASTIC_SLURM_PORT_BASE=17000
  ELASTIC_SLURM_PORT_RANGE=8000
  ELASTIC_SLURM_BIND_ADDR=''
  ELASTIC_SLURM_SECRET_KEY=''
  ELASTIC_SLURM_PUBLIC_KEYS_DIR=''
  ELASTIC_SLURM_STATE_DIR=/var/lib/elastic/slurm/job-%j
  ELASTIC_SLURM_SOCKET=/run/elastic/slurm-%j.sock
  ELASTIC_SLURM_LOG_DIR=/var/log/elastic/slurm/job-%j
  ELASTIC_SLURM_GPUS=auto
  ELASTIC_SLURM_VOTERS=3
  ELASTIC_SLURM_START_TIMEOUT=60
  ELASTIC_SLURM_STOP_TIMEOUT=30
  ELASTIC_SLURM_GPU_IDLE_TIMEOUT=10
}

# es_expand TEMPLATE: %j -> job id, %n -> node name (both validated by es_init).
es_expand() {
  printf '%s\n' "$1" | sed -e "s/%j/$ES_JOB/g" -e "s/%n/$ES_NODE/g"
}

es_is_uint() {
  case $1 in '' | *[!0-9]*) return 1 ;; esac
  return 0
}

# es_init ROLE: settings and names. Returns non-zero (after a message on stderr) when the
# hook cannot even tell which allocation it is for.
es_init() {
  ES_ROLE=$1
  ES_LOG_DIR=''
  es_defaults
  ES_CONF=${ELASTIC_SLURM_CONF:-$ES_DEFAULT_CONF}
  if [ -e "$ES_CONF" ]; then
    if ! [ -r "$ES_CONF" ]; then
      echo "elastic $ES_ROLE: cannot read the site settings $ES_CONF" >&2
      return 1
    fi
    # shellcheck disable=SC1090
    . "$ES_CONF" || {
      echo "elastic $ES_ROLE: the site settings $ES_CONF do not parse" >&2
      return 1
    }
  elif [ -n "${ELASTIC_SLURM_CONF:-}" ]; then
    echo "elastic $ES_ROLE: ELASTIC_SLURM_CONF names $ES_CONF, which does not exist" >&2
    return 1
  fi
  ES_JOB=${SLURM_JOB_ID:-${SLURM_JOBID:-}}
  ES_NODE=${SLURMD_NODENAME:-}
  # Both go into paths and sed expressions: accept only what Slurm can produce.
  if ! es_is_uint "$ES_JOB"; then
    echo "elastic $ES_ROLE: SLURM_JOB_ID '${ES_JOB}' is not a job id" >&2
    return 1
  fi
  case $ES_NODE in
    '' | *[!A-Za-z0-9._-]*)
      echo "elastic $ES_ROLE: SLURMD_NODENAME '${ES_NODE}' is not a node name" >&2
      return 1
      ;;
  esac
  for v in ELASTIC_SLURM_PORT_BASE ELASTIC_SLURM_PORT_RANGE ELASTIC_SLURM_VOTERS \
    ELASTIC_SLURM_START_TIMEOUT ELASTIC_SLURM_STOP_TIMEOUT ELASTIC_SLURM_GPU_IDLE_TIMEOUT; do
    val=''
    eval "val=\${$v}"
    if ! es_is_uint "$val"; then
      echo "elastic $ES_ROLE: $v='$val' in $ES_CONF is not a number" >&2
      return 1
    fi
  done
  if [ "$ELASTIC_SLURM_PORT_RANGE" -lt 1 ] ||
    [ $((ELASTIC_SLURM_PORT_BASE + ELASTIC_SLURM_PORT_RANGE - 1)) -gt 65535 ]; then
    echo "elastic $ES_ROLE: ELASTIC_SLURM_PORT_BASE + ELASTIC_SLURM_PORT_RANGE in $ES_CONF" \
      "leave 1..65535" >&2
    return 1
  fi
  ES_CLUSTER=slurm-$ES_JOB
  ES_PORT=$((ELASTIC_SLURM_PORT_BASE + ES_JOB % ELASTIC_SLURM_PORT_RANGE))
  ES_STATE_DIR=$(es_expand "$ELASTIC_SLURM_STATE_DIR")
  ES_SOCKET=$(es_expand "$ELASTIC_SLURM_SOCKET")
  ES_LOG_DIR=$(es_expand "$ELASTIC_SLURM_LOG_DIR")
  ES_PID_FILE=$ES_STATE_DIR/elasticd.pid
  ES_ALLOCATION_FILE=$ES_STATE_DIR/allocation
  # The daemon carries this in its environment: the epilog and the /proc scan recognise the
  # allocation's daemon by it (and its workers by ELASTIC_CONTROL_SOCKET, set by the daemon).
  ES_MARKER="ELASTIC_SLURM_ALLOCATION=$ES_SOCKET"
  return 0
}

# True when the job's partition is one of ELASTIC_SLURM_PARTITIONS (or that list is empty).
es_elastic_partition() {
  [ -z "$ELASTIC_SLURM_PARTITIONS" ] && return 0
  case " $ELASTIC_SLURM_PARTITIONS " in
    *" ${SLURM_JOB_PARTITION:-} "*) return 0 ;;
    *) return 1 ;;
  esac
}

es_now() { date -u '+%Y-%m-%dT%H:%M:%S.%3NZ'; }

# es_log MESSAGE...: one line in <log dir>/hooks.log (best effort: a log dir that cannot be
# written must not turn a working node into a drained one).
es_log() {
  [ -n "$ES_LOG_DIR" ] && [ -d "$ES_LOG_DIR" ] || return 0
  printf '%s %s job=%s node=%s: %s\n' "$(es_now)" "$ES_ROLE" "$ES_JOB" "$ES_NODE" "$*" \
    >>"$ES_LOG_DIR/hooks.log" 2>/dev/null || true
}

# es_fail MESSAGE...: the reason on stderr (slurmd logs a failing hook's output) and in
# hooks.log, then exit 1 (slurmd drains the node with "Prolog error" / "Epilog error").
es_fail() {
  echo "elastic $ES_ROLE: job $ES_JOB on $ES_NODE: $*" >&2
  es_log "FAILED: $*"
  exit 1
}

# es_proc_has PID STRING: /proc/PID/environ holds the exact NAME=value entry STRING.
es_proc_has() {
  tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF -- "$2"
}

# es_alive PID: the process exists and is not a zombie.
es_alive() {
  [ -r "/proc/$1/stat" ] || return 1
  # Field 3 of /proc/PID/stat, after the parenthesised command name.
  st=$(sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# es_daemon_pid: the recorded pid of this allocation's daemon on this node, if that process
# still runs and is that daemon (its environment carries the allocation marker); else nothing.
es_daemon_pid() {
  [ -r "$ES_PID_FILE" ] || return 0
  p=$(head -n1 "$ES_PID_FILE" 2>/dev/null)
  es_is_uint "$p" || return 0
  es_alive "$p" && es_proc_has "$p" "$ES_MARKER" && echo "$p"
  return 0
}

# es_ctl ARGS...: elasticctl against this allocation's daemon (no config file needed).
es_ctl() {
  "$ELASTICCTL" -c '' --set "control.socket=$ES_SOCKET" "$@"
}

# es_allocation_pids: every live process of this allocation on this node: the daemon (marker)
# and whatever carries ELASTIC_CONTROL_SOCKET=<socket> (workers, their children, job steps
# that got it from the TaskProlog). Never this shell.
es_allocation_pids() {
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = "$$" ] && continue
    env_lines=$(tr '\0' '\n' 2>/dev/null <"$e") || continue
    if printf '%s\n' "$env_lines" |
      grep -qxF -e "$ES_MARKER" -e "ELASTIC_CONTROL_SOCKET=$ES_SOCKET"; then
      es_alive "$p" && echo "$p"
    fi
  done
  return 0
}

# es_node_addr NAME: the node's address as Slurm knows it (NodeAddr; hostnames need not
# resolve where the hooks run), resolved to an IPv4 address when it is a name.
es_node_addr() {
  a=$(scontrol show node "$1" -o 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n1)
  [ -n "$a" ] || a=$1
  case $a in
    *[!0-9.]*)
      r=$(getent ahostsv4 "$a" 2>/dev/null | awk 'NR == 1 { print $1 }')
      [ -n "$r" ] && a=$r
      ;;
  esac
  echo "$a"
}
