#!/bin/sh
# Runs a libFuzzer binary for a bounded time from a freshly generated seed corpus.
# Usage: run_fuzz.sh <corpus generator> <fuzzer> <work dir> [libFuzzer flags...]
# Passes iff libFuzzer finds no crash, leak, timeout or property failure.
set -eu
generator=$1
fuzzer=$2
work=$3
shift 3
rm -rf "$work"
mkdir -p "$work/seeds" "$work/corpus"
"$generator" "$work/seeds"
cd "$work"  # crash-* reproducers land here
exec "$fuzzer" "$@" "$work/corpus" "$work/seeds"
