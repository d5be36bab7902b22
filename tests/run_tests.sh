#!/usr/bin/env bash
# Runs each test program given on the command line (executables and scripts) from the repository
# root, shows its output, and sums the "N passed, N failed" line each one prints. A program that
# crashes, exits non-zero or prints no such line counts as one more failure. Ends with the total
# "N passed, N failed", then how many checks and test programs that was, after the five slowest
# programs and their seconds:
#   48290 passed, 0 failed (48290 checks in 42 test programs; 0 programs failed)
# An argument NAME=value sets that environment variable for the programs after it (a script that
# runs some programs again under other settings calls this with them).
set -u
cd "$(dirname "$0")/.."
total_pass=0
total_fail=0
programs=0
programs_failed=0
settings=""
times="" # "ms name" per program
for bin in "$@"; do
    case "$bin" in
    [A-Za-z_]*=*)
        export "${bin?}"
        kept="" # the label names each variable once, with its last value
        for s in $settings; do
            [ "${s%%=*}" = "${bin%%=*}" ] || kept="$kept $s"
        done
        settings="$kept $bin"
        continue
        ;;
    esac
    programs=$((programs + 1))
    name=$(basename "$bin")
    echo "== $name${settings:+ (with$settings)}"
    out=$(mktemp)
    t0=$(date +%s%N)
    "$bin" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    ms=$((($(date +%s%N) - t0) / 1000000))
    times="$times$ms $name${settings:+ (with$settings)}
"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
    rm -f "$out"
    if [ -z "$line" ]; then
        echo "$name: no result line (exit $rc)"
        total_fail=$((total_fail + 1))
        programs_failed=$((programs_failed + 1))
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
    if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
        programs_failed=$((programs_failed + 1))
    fi
done
echo
echo "the slowest programs (seconds):" # where a suite's time goes, for keeping CI short
printf '%s' "$times" | sort -rn | head -n 5 | awk '{ printf "  %7.1f  %s\n", $1 / 1000, substr($0, index($0, " ") + 1) }'
echo "$total_pass passed, $total_fail failed ($((total_pass + total_fail)) checks in $programs test" \
    "programs; $programs_failed programs failed)"
[ "$total_fail" -eq 0 ]
