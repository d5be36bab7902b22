#!/usr/bin/env bash
# test_poison.sh - the engine's torch checks again with ATTND_POISON_SCRATCH=1: every block of working
# memory the engine hands out (a pass's scratch, fresh or kept by the pool from the pass before, and a
# selection's state) starts as 0xFF bytes, a NaN in every float. A path that read memory before
# writing it would show NaN in its results: with fresh pages it would read zeros and pass unseen, and
# with the pool's kept block it could read an earlier request's numbers. Sums the programs' results.
set -u
cd "$(dirname "$0")/../.."
build="${BUILD:-build}"
pass=0
fail=0
for t in test_golden test_select test_engine test_engine_variants; do
    echo "$t with ATTND_POISON_SCRATCH=1"
    line=$(ATTND_POISON_SCRATCH=1 "$build/tests/engine/$t" 2>&1 | tee /dev/stderr |
        grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$t: no result line"
        fail=$((fail + 1))
        continue
    fi
    pass=$((pass + $(echo "$line" | awk '{print $1}')))
    fail=$((fail + $(echo "$line" | awk '{print $3}')))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
