#!/bin/bash
# Job-tier fast failure detection in real elasticd daemons in network namespaces (tests/netns):
# 6 daemons, voters h0 h1 h2, elasticd's default settings, one job on 5 nodes (1 spare).
# kill -9 of a non-leader member -> the last survivor's "peer ... lost" log line (detection) and
# the next round running (recovery), TRIALS times; then LOSS% packet loss on every host for
# DURATION seconds, counting false "lost" declarations (target 0) and round changes.
# Prints Markdown tables (stdout) for bench/RESULTS.md; progress on stderr. Needs root and
# iproute2.
# Usage: bench/job-tier-netns.sh [build dir]   (default build/release; must be configured with
#        the daemon and the tests on). Environment: TRIALS (20), DURATION (600), LOSS (5).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/${1:-build/release}"
[ -f "$build/CMakeCache.txt" ] || { echo "$build is not a configured build dir" >&2; exit 1; }
cmake --build "$build" --target job_tier_netns_bench elasticd elasticctl -j "${JOBS:-2}" >&2
exec "$build/bench/consensus/job_tier_netns_bench" --trials "${TRIALS:-20}" \
  --duration "${DURATION:-600}" --loss "${LOSS:-5}"
