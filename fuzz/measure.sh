#!/usr/bin/env bash
# Runs every harness (or those named) for SECONDS (default 600) from a scratch copy of its committed
# corpus, JOBS at a time (default 2), and prints a Markdown table: executions, exec/s and edge
# coverage (libFuzzer's "cov:") at the end of the run, with the load average of the machine at the
# start and end of each run. The figures of fuzz/README.md come from it.
#   fuzz/measure.sh 600            every harness, 10 minutes each
#   JOBS=1 fuzz/measure.sh 60 http headers
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then FUZZ_TMPDIR=/dev/shm; fi
export TMPDIR=${FUZZ_TMPDIR:-${TMPDIR:-/tmp}}
secs=${1:-600}
shift || true
jobs=${JOBS:-2}
fuzz/build.sh >/dev/null || exit 1
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for h in fuzz/fuzz_*.c; do n=$(basename "$h" .c); names+=("${n#fuzz_}"); done
fi
out=build-fuzz/measure
mkdir -p "$out"
measure() {
    local n=$1 dir=$out/$n
    rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/artifacts"
    cp -r "fuzz/corpus/$n/." "$dir/corpus/" 2>/dev/null
    local load0 load1
    load0=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$dir" && nice -n 10 "$OLDPWD/build-fuzz/fuzz/fuzz_$n" -max_total_time="$secs" -timeout=30 \
        -rss_limit_mb=2560 -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix=artifacts/ \
        corpus > run.log 2>&1)
    load1=$(cut -d' ' -f1 /proc/loadavg)
    local last execs eps cov
    last=$(grep -aE '^#[0-9]+' "$dir/run.log" | tail -n 1)
    execs=$(grep -a 'stat::number_of_executed_units' "$dir/run.log" | awk '{print $2}')
    eps=$(grep -a 'stat::average_exec_per_sec' "$dir/run.log" | awk '{print $2}')
    cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | awk '{print $2}')
    local found="none"
    [ -n "$(ls -A "$dir/artifacts")" ] && found="$(ls "$dir/artifacts" | head -n 3 | tr '\n' ' ')"
    printf '| `%s` | %s | %s | %s | %s, %s | %s |\n' "$n" "${execs:-?}" "${eps:-?}" "${cov:-?}" "$load0" "$load1" "$found" >"$dir/row"
}
for n in "${names[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    measure "$n" &
done
wait
echo "| harness | executions | exec/s | edge coverage (cov) | load avg start, end | findings |"
echo "|---|---|---|---|---|---|"
for n in "${names[@]}"; do cat "$out/$n/row"; done
