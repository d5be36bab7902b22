#!/usr/bin/env bash
# bench/run_layers.sh - run by bench/run.sh: making 1 GiB layers - the initialisation on 1 and 2
# threads against a memset of the same memory, and /healthz's latency while a daemon makes three
# at once (build/bench/bench_layers; BENCH_E, BENCH_REPS).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
exec "$BUILD/bench/bench_layers"
