#!/usr/bin/env bash
# bench/run_v2.sh - run by bench/run.sh: one forward pass of the L shape (N=8 L=512 E=768 H=12,
# self-attention) through /v2 binary, /v2 JSON, /v1 nested JSON and /v1 base64 on one in-process
# daemon, with the engine alone as the floor (build/bench/bench_v2; BENCH_REPS=3 by default).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
exec "$BUILD/bench/bench_v2"
