#!/usr/bin/env bash
# make fuzz-check: every libFuzzer harness on its committed corpus, then a short run of each, under
# ASan + UBSan; fails on any crash, leak, timeout or sanitizer report. Part of CI (.ci/run).
#   FUZZ_CHECK_SECONDS   the time-boxed runs' total, shared by the harnesses (default 120; 0: replay only)
#   FUZZ_ONLY            a space-separated list of harness names to check (default: all)
# Everything it writes is under build-fuzz/check/: logs (NAME.log), what the short runs found
# (corpus/NAME: never the committed corpus), and a failing input (artifacts/NAME/crash-...), which
# reproduces with   build-fuzz/fuzz/fuzz_NAME build-fuzz/check/artifacts/NAME/crash-...
# Ends with "N passed, N failed" (one check per harness and step).
set -uo pipefail
cd "$(dirname "$0")/.."
# the harnesses that write files (data dir, checkpoints) do it under $TMPDIR: in memory when possible
if [ -z "${FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then FUZZ_TMPDIR=/dev/shm; fi
export TMPDIR=${FUZZ_TMPDIR:-${TMPDIR:-/tmp}}
root=$PWD
if ! fuzz/build.sh; then
    echo "fuzz-check: the harnesses do not build"
    echo "0 passed, 1 failed"
    exit 1
fi
names=()
for h in fuzz/fuzz_*.c; do
    n=$(basename "$h" .c)
    n=${n#fuzz_}
    if [ -n "${FUZZ_ONLY:-}" ] && ! [[ " $FUZZ_ONLY " == *" $n "* ]]; then continue; fi
    names+=("$n")
done
total=${FUZZ_CHECK_SECONDS:-120}
each=$(( ${#names[@]} ? total / ${#names[@]} : 0 ))
[ "$total" -gt 0 ] && [ "$each" -lt 1 ] && each=1
out=build-fuzz/check
mkdir -p "$out"
pass=0 fail=0

# Runs libFuzzer in $out (a run with -jobs writes fuzz-N.log into its working directory) and
# returns non-zero when it failed or a sanitizer spoke.
run() {
    local name=$1 log=$2
    shift 2
    (cd "$out" && ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
        UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        nice -n 5 "$root/build-fuzz/fuzz/fuzz_$name" -rss_limit_mb=2560 -malloc_limit_mb=2048 \
        -timeout=30 -print_final_stats=1 -artifact_prefix="artifacts/$name/" "$@") >"$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: ' "$log"; then
        return 1
    fi
}

report() { # name step log ok
    local stats
    stats=$(grep -E '^#[0-9]+.*(DONE|INITED)' "$3" | tail -n 1 | grep -oE 'cov: [0-9]+|exec/s: [0-9]+' | tr '\n' ' ')
    if [ "$4" = 1 ]; then
        pass=$((pass + 1))
        printf '  ok    %-14s %-8s %s\n' "$1" "$2" "$stats"
    else
        fail=$((fail + 1))
        printf '  FAIL  %-14s %-8s log: %s\n' "$1" "$2" "$3"
        grep -E 'ERROR|runtime error|SUMMARY|^[^ #=].*(FAIL|failed|differ|refused|still)|Test unit written' "$3" | head -n 15 | sed 's/^/        /'
        ls "$out/artifacts/$1/" 2>/dev/null | sed "s|^|        reproduce: build-fuzz/fuzz/fuzz_$1 $out/artifacts/$1/|" | head -n 3
        # the input itself, so that a CI log alone reproduces it: base64 -d > crash; fuzz_NAME crash
        local a
        for a in "$out/artifacts/$1/"*; do
            [ -f "$a" ] || continue
            if [ "$(stat -c %s "$a")" -le 65536 ]; then
                echo "        input (base64) of $(basename "$a"):"
                base64 -w 120 "$a" | sed 's/^/          /'
            fi
            break
        done
    fi
}

for name in "${names[@]}"; do
    mkdir -p "$out/artifacts/$name" "$out/corpus/$name"
    corpus=$root/fuzz/corpus/$name
    [ -d "$corpus" ] || mkdir -p "$corpus"
    log=$out/$name.replay.log
    if run "$name" "$root/$log" -runs=0 "$corpus"; then report "$name" replay "$log" 1; else report "$name" replay "$log" 0; continue; fi
    [ "$each" -gt 0 ] || continue
    log=$out/$name.run.log
    if run "$name" "$root/$log" -max_total_time="$each" "corpus/$name" "$corpus"; then
        report "$name" "${each}s" "$log" 1
    else
        report "$name" "${each}s" "$log" 0
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
