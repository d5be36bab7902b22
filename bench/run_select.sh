#!/usr/bin/env bash
# bench/run_select.sh - part of `make bench` (bench/run.sh runs every bench/run_*.sh): what choosing
# the weights costs (issue 25), build/bench/bench_select at L = S = 16384, E = 1024, H = 16, N = 1 on
# 2 threads (one head's 64 rows, the top 8 of every row of every head, a 64 x 64 pooled map of every
# head, against no weights), then at L = S = 4096 against the full per-head map too, then the same
# rows at L = S = 1024 and 2048 as /v2 requests with binary tensors to a daemon in the process, the
# full map included (what a client waits for), and last the selections that sweeps found costlier
# than the full map before they were fixed (top-k above 32, narrow pools) at L = S = 1024, in the
# engine and over HTTP. Arguments go to the first bench_select (SELECT_ARGS, e.g.
# SELECT_ARGS="--L 8192 --rounds 5"; the default's --http-L is kept unless given).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
echo
echo "== choosing the weights: heads, rows, top-k, pooled maps (bench/bench_select.c)"
args=${SELECT_ARGS:-}
case " $args " in *" --http-L "*) ;; *) args="$args --http-L 1024,2048" ;; esac
# shellcheck disable=SC2086
"$BUILD/bench/bench_select" $args
echo
echo "== the larger selections against the full map, L = S = 1024 (engine, then over HTTP)"
"$BUILD/bench/bench_select" --L 1024 --full-L 0 --rounds 5 \
    --rows nw,full,top8,top64,top256,pool256,pool512,avg-top64 --http-L 1024
