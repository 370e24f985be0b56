#!/bin/bash
# systemd_unit_test.sh: the elasticd unit under a real systemd. systemd boots as PID 1
# in systemd-nspawn on the host's own OS: --volatile=yes (a tmpfs root with the host's /usr
# read-only) plus an overlay of the host's /etc whose upper layer is in this test's work dir, so
# nothing is downloaded and nothing of the host changes. The container has its own network
# namespace (loopback only) and boots basic.target only (no service of the host starts in it).
# This build's binaries are bind-mounted read-only at /opt/elastic/{sbin,bin}, the unit goes to
# /etc/systemd/system as `make install PREFIX=/opt/elastic` writes it, /etc/elastic and the
# checkpoint root /srv/ckpt are directories of the work dir. One daemon: transport.curve = false
# on 127.0.0.1, cgroup_root = "auto". Then, in order:
#   ready     `systemctl start` finishes only on READY=1 (Type=notify); STATUS= is the daemon's
#             "member of 1 node ..." line; a worker runs in its own cgroup below the unit's
#             delegated one, found by "auto" whatever the layout (hybrid on such a host);
#   reload    an accepted file: `systemctl reload` exits 0 and the daemon applied it; a refused
#             file: `systemctl reload` FAILS, the reason is in the journal, the daemon runs on
#             with the old config (same pid) and STATUS says so; the fixed file reloads;
#   kill -9   the unit restarts the daemon (Restart=on-failure, NRestarts=1) and the job gets a
#             new worker;
#   stop      drain: the worker's TERM trap writes a checkpoint and exits 75, the daemon exits 0,
#             the unit ends inactive with Result=success;
#   exit 78   a cgroup_root of the other layout: the daemon exits 78, the unit ends failed and
#             stays so (RestartPreventExitStatus=78), the journal names the key and the layout;
#   watchdog  a drop-in shortens WatchdogSec= to 2s: the daemon's pings keep it alive for 3
#             intervals; SIGSTOP makes systemd kill it ("Watchdog timeout") and restart it;
#   layouts   on a hybrid host, a second container with the unified layout
#             (SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1): "auto" finds the unit's cgroup there too, and
#             the hybrid path exits 78.
# Afterwards the container is powered off, and the test checks that it left no mount, cgroup or
# runtime directory on the host (it never enables anything on the host).
#
# usage: systemd_unit_test.sh ELASTICD ELASTICCTL UNIT
#   UNIT: the unit configured with the /opt/elastic paths (tests/systemd/CMakeLists.txt).
# Exit 77 (ctest SKIP_RETURN_CODE) with the reason when not root, without systemd-nspawn
# (package systemd-container), or where systemd-nspawn cannot start a container at all.
# Environment: ESD_KEEP=1 keeps the work dir after a pass; it is always kept on failure.
set -uo pipefail
elasticd=${1:?elasticd}
elasticctl=${2:?elasticctl}
unit=${3:?unit}
t0=$(date +%s.%N)
machine=elastic-sd-$$
deadline=$(($(date +%s) + 200)) # the whole test; ctest's TIMEOUT (240) is only a backstop

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn is not installed (apt-get install systemd-container)"
for b in nsenter python3 findmnt; do command -v $b >/dev/null || skip "$b is not installed"; done
[ -x /lib/systemd/systemd ] || skip "no /lib/systemd/systemd to boot (package systemd)"
# --volatile=yes brings only the host's /usr: /bin, /sbin and /lib must live there (merged /usr,
# the Debian 12 default).
for d in /bin /sbin /lib; do
  [ -L "$d" ] || skip "$d is not a link into /usr (no merged /usr): --volatile=yes cannot boot this host's OS"
done
[ -x "$elasticd" ] && [ -x "$elasticctl" ] || skip "elasticd/elasticctl not built"
[ -r "$unit" ] || skip "no unit at $unit (configure the build)"

D=$(mktemp -d /tmp/esd-XXXXXX)
status=1
nspawn_pid=""
leader=""
boot_log=/dev/null
ckpt=$D/ckpt-none
layout=unknown
cgroups=() # the host cgroups this test made (nspawn puts the container below them)
runtime_dirs=()
for d in /run/systemd/nspawn-root /run/systemd/nspawn/propagate /run/systemd/nspawn; do
  [ -e "$d" ] || runtime_dirs+=("$d") # nspawn leaves them where /run is no tmpfs
done

ts() { python3 -c 'import sys,time; print(f"[systemd-test {time.time()-float(sys.argv[1]):6.1f}s] {sys.argv[2]}")' "$t0" "$*"; }
in_ct() { # run a command inside the container (all its namespaces, its root)
  nsenter --target "$leader" --all --root --wd -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 "$@"
}
ctl() { in_ct /opt/elastic/bin/elasticctl -c '' "$@"; }
prop() { in_ct systemctl show -p "$1" --value elasticd.service 2>/dev/null; }
journal() { in_ct journalctl -u elasticd.service -o cat --no-pager 2>/dev/null; }
fail() {
  echo "FAIL: $*" >&2
  if [ -n "$leader" ] && kill -0 "$leader" 2>/dev/null; then
    echo "---- systemctl status elasticd" >&2
    in_ct systemctl status --no-pager -l elasticd.service >&2 2>&1
    echo "---- journal of elasticd (last 40 lines)" >&2
    journal | tail -n 40 >&2
  fi
  echo "---- boot log (last 15 lines)" >&2
  tail -n 15 "$boot_log" >&2 2>/dev/null
  exit 1
}
# wait_for SECONDS WHAT CMD...: poll CMD until it succeeds; fail at the deadline.
wait_for() {
  local limit=$1 what=$2 end
  shift 2
  end=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s waiting for $what"
    [ "$(date +%s)" -lt "$deadline" ] || fail "the test ran out of time waiting for $what"
    sleep 0.2
  done
}
# holds SECONDS WHAT CMD...: CMD keeps succeeding for SECONDS; fail the first time it does not.
holds() {
  local limit=$1 what=$2 end
  shift 2
  end=$(($(date +%s) + limit))
  while [ "$(date +%s)" -lt "$end" ]; do
    "$@" >/dev/null 2>&1 || fail "$what stopped holding"
    sleep 0.2
  done
}
is() { [ "$(prop "$1")" = "$2" ]; }
is_not() { [ "$(prop "$1")" != "$2" ]; }
state_is() { [ "$(prop ActiveState)/$(prop SubState)" = "$1" ]; }
running_with_new_pid() { # OLD_PID RESTARTS: active again, restarted RESTARTS times, another pid
  state_is active/running && is NRestarts "$2" && is_not MainPID "$1" && is_not MainPID 0
}
status_json() { ctl status --json 2>/dev/null; }
# has PATTERN CMD...: CMD's output matches PATTERN (no pipe into grep -q: with pipefail, the
# writer's SIGPIPE after an early match would count as a failure).
has() {
  local out
  out=$("${@:2}" 2>/dev/null)
  grep -q -- "$1" <<<"$out"
}
py() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
write_config() { # CGROUP_ROOT LOG_LEVEL
  cat >"$D/etc-elastic/elasticd.toml" <<CONF
# the systemd tier's one-node cluster (tests/systemd/systemd_unit_test.sh)
[node]
name = "ct1"
cpu_slots = 2
[transport]
bind = "tcp://127.0.0.1:7946"
curve = false
[spawner]
cgroup_root = "$1"
[checkpoint]
root = "/srv/ckpt"
[logging]
level = "$2"
CONF
}

# Powers the container off: SIGTERM makes nspawn ask its systemd to power off; what is left
# after 20 s gets SIGKILL (the container's PID 1 first: its PID namespace dies with it).
power_off() {
  [ -n "$nspawn_pid" ] || return 0
  kill -TERM "$nspawn_pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$nspawn_pid" 2>/dev/null; then
    echo "the container did not power off in 20 s; killing it" >&2
    [ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null
    kill -KILL "$nspawn_pid" 2>/dev/null
  fi
  wait "$nspawn_pid" 2>/dev/null
  nspawn_pid=""
  leader=""
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ $status = 0 ] || rc=1
  power_off
  # Our cgroups, deepest first, once their processes are gone (nspawn's payload/supervisor and
  # the container's own tree live below them).
  local cg left=""
  for cg in "${cgroups[@]}"; do
    for _ in $(seq 50); do
      [ -z "$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break
      sleep 0.2
    done
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -e "$cg" ] && left="$left $cg"
  done
  local d
  for d in "${runtime_dirs[@]}"; do rmdir "$d/$machine" "$d" 2>/dev/null; done
  rmdir "/run/systemd/nspawn/propagate/$machine" 2>/dev/null
  local mounts
  mounts=$(grep -e "$D" -e "$machine" /proc/self/mountinfo)
  if [ -n "$left$mounts" ]; then
    echo "FAIL: left behind on the host: cgroups:${left:- none}; mounts: ${mounts:-none}" >&2
    rc=1
  fi
  if [ "$rc" = 0 ] && [ -z "${ESD_KEEP:-}" ]; then
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

# ---- where the container's cgroups go on the host ------------------------------------------------
# With systemd on the host, a transient scope with Delegate=yes holds nspawn (--keep-unit) and is
# collected when it ends. Without (a CI container, a sandbox), the test makes a cgroup of its own
# below its current one in the cgroup2 hierarchy and in the v1 name=systemd one (a hybrid host),
# moves nspawn into them, and removes them afterwards; nspawn nests its own below.
if [ ! -d /run/systemd/system ]; then
  while read -r point kind; do
    case $kind in
      cgroup2) own=$(sed -n 's/^0:://p' /proc/self/cgroup) ;;
      *) own=$(sed -n 's/^[0-9]*:name=systemd://p' /proc/self/cgroup) ;;
    esac
    cg="$point${own%/}/$machine"
    mkdir "$cg" 2>"$D/mkdir.err" || skip "cannot create the cgroup $cg for the container: $(cat "$D/mkdir.err")"
    cgroups+=("$cg")
  done < <(findmnt -rn -o TARGET,FSTYPE,OPTIONS | awk '$2 == "cgroup2" {print $1, "cgroup2"}
      $2 == "cgroup" && $3 ~ /name=systemd/ {print $1, "systemd"}')
fi
# start_nspawn NAME ARGS...: systemd-nspawn ARGS in the background, with the environment
# assignments in nspawn_env; $! is its pid.
nspawn_env=()
start_nspawn() {
  (
    for cg in "${cgroups[@]}"; do echo "$BASHPID" >"$cg/cgroup.procs" || exit 97; done
    if [ -d /run/systemd/system ]; then # systemd-run --scope becomes the command
      exec env "${nspawn_env[@]}" systemd-run --quiet --scope --collect -p Delegate=yes \
        --unit="$machine-$1" systemd-nspawn "${@:2}"
    fi
    exec env "${nspawn_env[@]}" systemd-nspawn "${@:2}"
  ) &
}
common=(--quiet --register=no --keep-unit --directory=/ --volatile=yes)

# Can nspawn make a container here at all? (A container without CAP_SYS_ADMIN cannot.)
start_nspawn probe "${common[@]}" --machine="$machine" /usr/bin/true >"$D/probe.log" 2>&1
if ! wait $!; then
  skip "systemd-nspawn cannot start a container here: $(tr '\n' ' ' <"$D/probe.log")"
fi

# ---- the container ---------------------------------------------------------------------------------
find_leader() { # the container's PID 1: nspawn's child that runs systemd
  local p
  for p in $(pgrep -P "$nspawn_pid"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && { leader=$p; return 0; }
  done
  return 1
}
booted() { case $(in_ct systemctl is-system-running 2>/dev/null) in running | degraded) return 0 ;; esac; return 1; }
# boot TAG: a fresh container (its /etc changes in $D/etc-TAG, checkpoints in $D/ckpt-TAG, which
# becomes $ckpt) with the unit installed; sets nspawn_pid, leader and layout.
mkdir -p "$D/etc-elastic"
boot() {
  ckpt=$D/ckpt-$1
  mkdir -p "$D/etc-$1/systemd/system" "$ckpt"
  cp "$unit" "$D/etc-$1/systemd/system/elasticd.service"
  start_nspawn "boot-$1" "${common[@]}" --machine="$machine" --private-network \
    --console=read-only --overlay="/etc:$D/etc-$1:/etc" --bind="$D/etc-elastic:/etc/elastic" \
    --bind="$ckpt:/srv/ckpt" --bind-ro="$elasticd:/opt/elastic/sbin/elasticd" \
    --bind-ro="$elasticctl:/opt/elastic/bin/elasticctl" \
    --boot systemd.unit=basic.target >"$D/boot-$1.log" 2>&1
  nspawn_pid=$!
  boot_log=$D/boot-$1.log
  wait_for 30 "the container's systemd to start" find_leader
  wait_for 60 "the container to boot (systemctl is-system-running)" booted
  layout=hybrid
  in_ct test -d /sys/fs/cgroup/unified || layout=unified
  ts "container $machine booted: systemd $(in_ct systemctl --version | sed -n '1s/systemd \([0-9]*\).*/\1/p') as PID 1, cgroup layout $layout"
  has '^ExecReload=/opt/elastic/bin/elasticctl ' in_ct systemctl cat elasticd.service ||
    fail "the container's systemd does not load this build's unit"
}
# The cgroup_root of the other layout (on a hybrid host, a unified host's path: the unit's old
# example).
other_layout_path() {
  if [ "$layout" = hybrid ]; then echo /sys/fs/cgroup/system.slice/elasticd.service
  else echo /sys/fs/cgroup/unified/system.slice/elasticd.service; fi
}
# submit_worker: a one-rank job whose worker records its cgroup and checkpoints on TERM; checks
# that the worker runs in a cgroup of its own below the unit's (cgroup_root = "auto").
worker_rounds() { ls "$ckpt" | sed -n 's/^cgroup-//p' | sort -n; }
has_worker() { [ -n "$(worker_rounds)" ]; }
submit_worker() {
  local worker own
  worker='mkdir -p "$ELASTIC_CHECKPOINT_DIR"
trap '"'"'mkdir "$ELASTIC_CHECKPOINT_DIR/step-$ELASTIC_ROUND"; echo "step-$ELASTIC_ROUND" >"$ELASTIC_CHECKPOINT_DIR/LATEST"; exit 75'"'"' TERM
cat /proc/self/cgroup >"/srv/ckpt/cgroup-$ELASTIC_ROUND"
while :; do sleep 0.1; done'
  ctl submit --name sd --nodes 1 --workers-per-node 1 --checkpoint-root /srv/ckpt \
    -- /bin/sh -c "$worker" >"$D/submit.out" 2>&1 || fail "elasticctl submit failed: $(cat "$D/submit.out")"
  job=$(sed -n 's/^submitted \([^ ]*\).*/\1/p' "$D/submit.out")
  [ -n "$job" ] || fail "no job id in: $(cat "$D/submit.out")"
  wait_for 30 "the worker of job $job to start" has_worker
  round=$(worker_rounds | tail -n1)
  own=$(sed -n 's/^0:://p' "$ckpt/cgroup-$round")
  case $own in
    /system.slice/elasticd.service/w-*) ;;
    *) fail "the worker's cgroup is '$own', not one of its own below the unit's (cgroup_root = \"auto\")" ;;
  esac
  ts "job $job: worker of round $round in cgroup $own ($layout layout)"
}
write_config auto info
boot host

# ---- ready: Type=notify, STATUS, the worker's cgroup ------------------------------------------
# --no-block: with TimeoutStartSec=infinity a daemon that never sent READY=1 would hang start.
in_ct systemctl start --no-block elasticd.service || fail "systemctl start elasticd failed"
wait_for 30 "READY=1 (active/running)" state_is active/running
[ "$(prop Type)" = notify ] || fail "Type is $(prop Type), not notify"
status_has() { has "$1" prop StatusText; }
wait_for 20 "STATUS= to show the cluster and its leader" status_has "^member of 1 node (1 alive); leader ct1 term"
ts "ready: $(prop StatusText)"

submit_worker

# ---- reload: accepted, then refused (systemctl reload fails), then fixed -------------------------
write_config auto debug
in_ct systemctl reload elasticd.service >"$D/reload.out" 2>&1 || fail "systemctl reload of a valid file failed: $(cat "$D/reload.out")"
last_reload() { status_json | py 'd["config"]["last_reload"]["ok"], d["config"]["last_reload"]["message"]'; }
has "^True .*logging.level" last_reload || fail "the valid reload was not applied: $(last_reload)"
pid=$(prop MainPID)
write_config auto loud
if in_ct systemctl reload elasticd.service >"$D/refused.out" 2>&1; then
  fail "systemctl reload returned 0 for a refused file"
fi
state_is active/running && is MainPID "$pid" || fail "a refused reload did not leave the daemon running"
status_has "^reload failed: /etc/elastic/elasticd.toml:[0-9]*: logging.level" ||
  fail "STATUS does not say why the reload failed: $(prop StatusText)"
has "elasticctl: reload refused: /etc/elastic/elasticd.toml:[0-9]*: logging.level" journal ||
  fail "the journal does not carry elasticctl's reason for the refused reload"
has "^False" last_reload || fail "status does not show the refused reload: $(last_reload)"
write_config auto info
in_ct systemctl reload elasticd.service >"$D/reload.out" 2>&1 || fail "systemctl reload of the fixed file failed: $(cat "$D/reload.out")"
wait_for 10 "STATUS to drop the reload failure" status_has "^member of"
ts "reload: valid -> 0; refused -> systemctl reload failed: $(head -n1 "$D/refused.out"); fixed -> 0"

# ---- kill -9: Restart=on-failure -----------------------------------------------------------------
restarts=$(prop NRestarts)
in_ct kill -KILL "$pid"
wait_for 20 "the unit to restart the daemon after kill -9" running_with_new_pid "$pid" $((restarts + 1))
new_round() { [ "$(worker_rounds | tail -n1)" -gt "$round" ]; }
wait_for 40 "job $job to get a new worker after the restart" new_round
round=$(worker_rounds | tail -n1)
ts "kill -9: restarted (NRestarts=$(prop NRestarts), pid $pid -> $(prop MainPID)); worker of round $round"

# ---- stop: drain with a checkpoint ---------------------------------------------------------------
timeout 90 nsenter --target "$leader" --all --root --wd -- systemctl stop elasticd.service ||
  fail "systemctl stop elasticd failed or hung"
state_is inactive/dead && is Result success && is ExecMainStatus 0 ||
  fail "after the stop: $(prop ActiveState)/$(prop SubState), Result=$(prop Result), status $(prop ExecMainStatus)"
[ -d "$ckpt/$job/step-$round" ] && grep -qx "step-$round" "$ckpt/$job/LATEST" ||
  fail "the worker of round $round wrote no checkpoint on SIGTERM: $(ls -R "$ckpt")"
ts "stop: drained (checkpoint step-$round), Result=success, exit 0"

# ---- exit 78: no restart -------------------------------------------------------------------------
wrong=$(other_layout_path)
write_config "$wrong" info
restarts=$(prop NRestarts)
in_ct systemctl start --no-block elasticd.service
wait_for 20 "the unit to fail on exit 78" state_is failed/failed
is ExecMainStatus 78 || fail "the daemon exited $(prop ExecMainStatus), not 78"
has "spawner.cgroup_root: '$wrong' is not a writable cgroup v2 directory" journal ||
  fail "the journal does not name spawner.cgroup_root"
failed_still() { state_is failed/failed && is NRestarts "$restarts"; }
holds 7 "failed without a restart (RestartSec=5s)" failed_still
ts "exit 78: failed, not restarted for 7 s"
in_ct systemctl reset-failed elasticd.service

# ---- watchdog -------------------------------------------------------------------------------------
write_config auto info
in_ct sh -c 'mkdir -p /etc/systemd/system/elasticd.service.d &&
  printf "[Service]\nWatchdogSec=2s\nTimeoutAbortSec=2s\n" >/etc/systemd/system/elasticd.service.d/watchdog.conf &&
  systemctl daemon-reload' || fail "cannot install the watchdog drop-in"
in_ct systemctl start --no-block elasticd.service
wait_for 30 "the daemon to start with WatchdogSec=2s" state_is active/running
[ "$(prop WatchdogUSec)" = 2s ] || fail "WatchdogUSec is $(prop WatchdogUSec)"
pid=$(prop MainPID)
restarts=$(prop NRestarts)
alive_same() { state_is active/running && is MainPID "$pid"; }
holds 6 "the daemon alive on its watchdog pings" alive_same
in_ct kill -STOP "$pid"
wait_for 20 "the watchdog to restart the hung daemon" running_with_new_pid "$pid" $((restarts + 1))
has "Watchdog timeout" journal || fail "no 'Watchdog timeout' in the journal"
ts "watchdog: pings kept it alive 6 s; SIGSTOP -> killed and restarted"
timeout 90 nsenter --target "$leader" --all --root --wd -- systemctl stop elasticd.service ||
  fail "the stop after the watchdog restart failed"

# ---- the other layout: "auto" finds the unit's cgroup there too ----------------------------------
# nspawn can give a container the unified layout on a hybrid host, not the reverse.
if [ "$layout" = hybrid ]; then
  power_off
  nspawn_env=(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)
  write_config auto info
  boot unified
  [ "$layout" = unified ] || fail "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 did not give a unified container"
  in_ct systemctl start --no-block elasticd.service || fail "systemctl start elasticd failed"
  wait_for 30 "READY=1 (active/running)" state_is active/running
  submit_worker
  timeout 90 nsenter --target "$leader" --all --root --wd -- systemctl stop elasticd.service ||
    fail "systemctl stop elasticd failed or hung"
  wrong=$(other_layout_path)
  write_config "$wrong" info
  in_ct systemctl start --no-block elasticd.service
  wait_for 20 "the unit to fail on exit 78" state_is failed/failed
  is ExecMainStatus 78 || fail "the daemon exited $(prop ExecMainStatus), not 78"
  has "spawner.cgroup_root: '$wrong' is not a writable cgroup v2 directory" journal ||
    fail "the journal does not name spawner.cgroup_root"
  ts "unified layout: the hybrid path exits 78"
else
  ts "the host's layout is $layout: no hybrid container to compare with (nspawn cannot make one)"
fi

status=0
