#!/bin/sh
# cluster-up.sh: a throw-away Slurm cluster for the elastic Slurm tests (root, no systemd, no
# cgroups), after research/slurm-recipe.md: munged, slurmctld and N slurmd, each slurmd in its
# own network and UTS namespace (own IP NET.(10+k), own 127.0.0.1, hostname nK) on a bridge,
# fake GPUs through gres (character devices with /dev/null's numbers).
#
# usage: cluster-up.sh DIR N HOOK_DIR
#   DIR       everything lives here (config, state, logs, pid files, fake devices)
#   HOOK_DIR  holds prolog.sh, epilog.sh and taskprolog.sh for slurm.conf
# Environment: NET (first three octets, default 10.231.86), PREFIX (netns/link name prefix,
# at most 6 characters, default esl), CTLD_PORT (26817), SLURMD_PORT (26818), GPUS per node (4),
# PROLOG_TIMEOUT (PrologEpilogTimeout, 40). Every daemon's pid goes to DIR/run/<name>.pid;
# cluster-down.sh ends them by those pids. Exits non-zero (after saying why) when a step fails;
# the caller runs cluster-down.sh in every case.
set -eu
D=$1
N=$2
HOOKS=$3
NET=${NET:-10.231.86}
PREFIX=${PREFIX:-esl}
CTLD_PORT=${CTLD_PORT:-26817}
SLURMD_PORT=${SLURMD_PORT:-26818}
GPUS=${GPUS:-4}
PROLOG_TIMEOUT=${PROLOG_TIMEOUT:-40}
HOST=$(hostname -s)
CONF=$D/etc/slurm.conf
export SLURM_CONF="$CONF"

waitfor() { # waitfor SECONDS WHAT CMD...
  _end=$(($(date +%s) + $1)); _what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$_end" ] || { echo "cluster-up: timed out waiting for $_what" >&2; return 1; }
    sleep 0.1
  done
}
start() { # start NAME CMD...: setsid execs in place (a background child is no group leader)
  _n=$1; shift
  setsid "$@" >"$D/log/$_n.stdout" 2>&1 </dev/null &
  echo $! >"$D/run/$_n.pid"
}

[ -e "$D/run/slurmctld.pid" ] && { echo "cluster-up: $D is already up" >&2; exit 1; }
mkdir -p "$D/etc" "$D/state" "$D/run" "$D/log" "$D/fakedev" "$D/munge"
chmod 755 "$D" "$D/munge" "$D/etc"
for k in $(seq 1 "$N"); do mkdir -p "$D/spool/n$k"; done

# munge: a private key and socket (a path-named socket is shared by every namespace)
dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$D/munge/munge.key"
start munged munged -F --key-file="$D/munge/munge.key" --socket="$D/munge/munge.socket" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munge/munged.seed"
waitfor 10 munged sh -c "munge -S '$D/munge/munge.socket' -n | unmunge -S '$D/munge/munge.socket'"

# fake GPUs: slurmd accepts only character or block devices
for i in $(seq 0 $((GPUS - 1))); do
  mknod -m 666 "$D/fakedev/nvidia$i" c 1 3
done

# the namespaces: bridge <PREFIX>b0 with NET.1 (slurmctld), node k at NET.(10+k)
ip link add "${PREFIX}b0" type bridge
ip addr add "$NET.1/24" dev "${PREFIX}b0"
ip link set "${PREFIX}b0" up
for k in $(seq 1 "$N"); do
  ip netns add "$PREFIX-n$k"
  ip link add "${PREFIX}${k}h" type veth peer name "${PREFIX}${k}n"
  ip link set "${PREFIX}${k}h" master "${PREFIX}b0" up
  ip link set "${PREFIX}${k}n" netns "$PREFIX-n$k"
  ip -n "$PREFIX-n$k" link set lo up
  ip -n "$PREFIX-n$k" addr add "$NET.$((10 + k))/24" dev "${PREFIX}${k}n"
  ip -n "$PREFIX-n$k" link set "${PREFIX}${k}n" up
done

cat >"$CONF" <<CONF
ClusterName=elastictest
SlurmctldHost=${HOST}(${NET}.1)
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${D}/munge/munge.socket,cred_expire=10
StateSaveLocation=${D}/state
SlurmdSpoolDir=${D}/spool/%n
SlurmctldPidFile=${D}/run/slurmctld.self.pid
SlurmdPidFile=${D}/run/slurmd-%n.self.pid
SlurmctldLogFile=${D}/log/slurmctld.log
SlurmdLogFile=${D}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=nohold_on_prolog_fail,batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
Prolog=${HOOKS}/prolog.sh
Epilog=${HOOKS}/epilog.sh
TaskProlog=${HOOKS}/taskprolog.sh
PrologFlags=Alloc,Contain
PrologEpilogTimeout=${PROLOG_TIMEOUT}
NodeName=n[1-$N] NodeAddr=$NET.[11-$((10 + N))] NodeHostname=n[1-$N] CPUs=4 RealMemory=2000 Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat >"$D/etc/gres.conf" <<GRES
AutoDetect=off
NodeName=n[1-$N] Name=gpu File=${D}/fakedev/nvidia[0-$((GPUS - 1))]
GRES
chmod 644 "$CONF" "$D/etc/gres.conf"

start slurmctld slurmctld -D -c -f "$CONF"
waitfor 30 slurmctld scontrol ping
for k in $(seq 1 "$N"); do
  # nsenter, not 'ip netns exec' (which remounts /sys: slurmd then finds no cgroup fs)
  start "slurmd-n$k" nsenter --net="/run/netns/$PREFIX-n$k" unshare --uts \
    sh -c "hostname n$k && exec slurmd -D -N n$k -f '$CONF'"
done
waitfor 60 "$N idle nodes" sh -c "[ \"\$(sinfo -h -N -o '%T' | grep -cx idle)\" -eq $N ]"
