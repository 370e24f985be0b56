#!/bin/bash
# Preemption numbers of the shared-cluster scheduler (bench/RESULTS.md): 3 elasticd daemons in
# network namespaces with elasticd's default settings; a low-priority Fashion-MNIST job of real
# elastic-trainer Gloo workers holds every host, then a 2-node job of priority 10 arrives. Timed
# from its submit to its first training step, once with a low job that shrinks in place (nodes
# 1:3) and once with one that is requeued whole (nodes 3, preemptible). See
# bench/preemption/preemption_netns_bench.cc for exactly what each column measures.
# Prints a Markdown table (stdout) with the machine and the command; progress on stderr. Needs
# root and iproute2; takes about 5 minutes with the defaults.
# Usage: bench/preemption.sh [build dir]   (default build/release; configured with the daemon,
#        the trainer and the tests). Environment: INCIDENTS (5 of each kind).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build/release}
case $build in /*) ;; *) build=$here/$build ;; esac
[ -f "$build/CMakeCache.txt" ] || { echo "$build is not a configured build dir" >&2; exit 1; }
cmake --build "$build" --target preemption_netns_bench elasticd elasticctl elastic-trainer \
  -j "${JOBS:-2}" >&2
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "Machine: $(nproc) vCPU ($cpu), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
  "$(. /etc/os-release; echo "$PRETTY_NAME"), kernel $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "Command: bench/preemption.sh $* (INCIDENTS=${INCIDENTS:-5})"
echo
exec "$build/tests/netns/preemption_netns_bench" --incidents "${INCIDENTS:-5}"
