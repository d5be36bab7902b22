#!/usr/bin/env bash
# bench/run_float_format.sh - run by bench/run.sh (`make bench`): ns per number of the shortest
# float32 writer against the previous implementation, same run (build/bench/bench_float_format;
# arguments: --reps N --count N).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
echo
"$BUILD/bench/bench_float_format" "$@"
