#!/bin/bash
# Real elasticd daemons in network namespaces (tests/netns): time from kill -9 of one daemon
# until every other daemon marks it dead, and idle CPU / RSS per daemon, for elasticd's default
# membership timers and the namespace tests' short timers. Prints Markdown tables (stdout) for
# bench/RESULTS.md; progress on stderr. Needs root and iproute2.
# Usage: bench/membership-netns.sh [build dir]   (default build/release; must be configured
#        with the daemon on). Environment: HOSTS (5), REPEATS (5), IDLE_SECONDS (60),
#        TIMERS (both | default | short).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/${1:-build/release}"
[ -f "$build/CMakeCache.txt" ] || { echo "$build is not a configured build dir" >&2; exit 1; }
cmake --build "$build" --target membership_netns_bench elasticd elasticctl -j "${JOBS:-2}" >&2
exec "$build/tests/netns/membership_netns_bench" --hosts "${HOSTS:-5}" \
  --repeats "${REPEATS:-5}" --idle-seconds "${IDLE_SECONDS:-60}" --timers "${TIMERS:-both}"
