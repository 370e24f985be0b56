#!/bin/bash
# Raft in real elasticd daemons in network namespaces (tests/netns): 5 daemons, 3 voters,
# elasticd's default timers. Leader failover after kill -9 (a survivor reports itself leader;
# the first submit through a survivor acknowledged), sequential submit latency (through the
# leader and through a non-voter) and the throughput of concurrent elasticctl submit loops.
# Prints Markdown tables (stdout) for bench/RESULTS.md; progress on stderr. Needs root and
# iproute2.
# Usage: bench/consensus-netns.sh [build dir]   (default build/release; must be configured with
#        the daemon and the tests on). Environment: TRIALS (20), SUBMITS (100),
#        CONCURRENCY (1,4,16), TIMERS (default | short).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/${1:-build/release}"
[ -f "$build/CMakeCache.txt" ] || { echo "$build is not a configured build dir" >&2; exit 1; }
cmake --build "$build" --target consensus_netns_bench elasticd elasticctl -j "${JOBS:-2}" >&2
exec "$build/bench/consensus/consensus_netns_bench" --trials "${TRIALS:-20}" \
  --submits "${SUBMITS:-100}" --concurrency "${CONCURRENCY:-1,4,16}" --timers "${TIMERS:-default}"
