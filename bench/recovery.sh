#!/bin/bash
# Recovery numbers of issue 5 (bench/RESULTS.md): 3 elasticd daemons in network namespaces with
# elasticd's default settings and a Fashion-MNIST job of real elastic-trainer Gloo workers;
# INCIDENTS kills of a daemon (+ its worker) and INCIDENTS kills of one worker, each timed from
# the kill to the first training step of the next round (detect, decide, rendezvous, spawn, load;
# stop), and the daemons' idle CPU and RSS over IDLE seconds. See
# bench/recovery/recovery_netns_bench.cc for exactly what each column measures.
# Prints Markdown tables (stdout) with the machine and the command; progress on stderr. Needs
# root and iproute2; takes about 10 minutes with the defaults.
# Usage: bench/recovery.sh [build dir]   (default build/release; configured with the daemon, the
#        trainer and the tests). Environment: INCIDENTS (10), IDLE (60), KINDS ("daemon worker";
#        add "leader" for kills of the Raft leader's host), LIVE (1; 0 runs the trainer with --no-live:
#        the stop-and-restart path).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build/release}
case $build in /*) ;; *) build=$here/$build ;; esac
[ -f "$build/CMakeCache.txt" ] || { echo "$build is not a configured build dir" >&2; exit 1; }
cmake --build "$build" --target recovery_netns_bench elasticd elasticctl elastic-trainer \
  -j "${JOBS:-2}" >&2
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "Machine: $(nproc) vCPU ($cpu), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
  "$(. /etc/os-release; echo "$PRETTY_NAME"), kernel $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "Command: bench/recovery.sh $* (INCIDENTS=${INCIDENTS:-10} IDLE=${IDLE:-60} KINDS=${KINDS:-daemon worker} LIVE=${LIVE:-1})"
echo
exec "$build/tests/netns/recovery_netns_bench" --incidents "${INCIDENTS:-10}" --idle "${IDLE:-60}"
