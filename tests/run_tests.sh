#!/usr/bin/env bash
# Runs each test executable given on the command line from the repository root, shows its output,
# and sums the "N passed, N failed" line each one prints. A binary that crashes, exits non-zero
# or prints no such line counts as one more failure. Ends with the total "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
total_pass=0
total_fail=0
for bin in "$@"; do
    name=$(basename "$bin")
    echo "== $name"
    out=$(mktemp)
    "$bin" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
    rm -f "$out"
    if [ -z "$line" ]; then
        echo "$name: no result line (exit $rc)"
        total_fail=$((total_fail + 1))
        continue
    fi
    p=$(echo "$line" | awk '{print $1}')
    f=$(echo "$line" | awk '{print $3}')
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$name: exit status $rc with no failed check"
        total_fail=$((total_fail + 1))
    fi
done
echo
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
