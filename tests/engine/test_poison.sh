#!/usr/bin/env bash
# test_poison.sh - the engine's torch checks again with ATTND_POISON_SCRATCH=1: every block of working
# memory the engine hands out (a pass's scratch, fresh or kept by the pool from the pass before, and a
# selection's state) starts as 0xFF bytes, a NaN in every float. A path that read memory before
# writing it would show NaN in its results: with fresh pages it would read zeros and pass unseen, and
# with the pool's kept block it could read an earlier request's numbers. Ends with the programs' sum.
set -u
cd "$(dirname "$0")/../.."
build="${BUILD:-build}/tests/engine"
exec tests/run_tests.sh ATTND_POISON_SCRATCH=1 "$build/test_golden" "$build/test_select" \
    "$build/test_engine" "$build/test_engine_variants"
