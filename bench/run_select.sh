#!/usr/bin/env bash
# bench/run_select.sh - part of `make bench` (bench/run.sh runs every bench/run_*.sh): what choosing
# the weights costs (issue 25), build/bench/bench_select at L = S = 16384, E = 1024, H = 16, N = 1 on
# 2 threads (one head's 64 rows, the top 8 of every row of every head, a 64 x 64 pooled map of every
# head, against no weights), then at L = S = 4096 against the full per-head map too, then the same
# rows at L = S = 1024 and 2048 as /v2 requests with binary tensors to a daemon in the process, the
# full map included (what a client waits for). Arguments go to bench_select (SELECT_ARGS, e.g.
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
