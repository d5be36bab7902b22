#!/usr/bin/env bash
# bench/run_codec.sh - run by bench/run.sh (`make bench`): MB/s of the JSON tensor codec, each form
# in each direction, on an L-sized tensor (build/bench/bench_codec; arguments: --reps N --scale F).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
echo
"$BUILD/bench/bench_codec" "$@"
