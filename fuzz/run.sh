#!/usr/bin/env bash
# Runs one harness for SECONDS (default 60) at low priority, on a scratch copy of its seed corpus
# (build-fuzz/corpus/NAME, which keeps what the fuzzer finds between runs), with crash reproducers
# written to build-fuzz/artifacts/NAME/. Extra arguments go to libFuzzer (-jobs=N writes its
# fuzz-N.log files into build-fuzz/logs/, the working directory of the run).
#   fuzz/run.sh tensor_parse 300
#   build-fuzz/fuzz/fuzz_tensor_parse build-fuzz/artifacts/tensor_parse/crash-...   (reproduce)
# To fold what a run found into the committed corpus, minimised: fuzz/merge.sh NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
# the harnesses that write files (data dir, checkpoints) do it under $TMPDIR: in memory when possible
if [ -z "${FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then FUZZ_TMPDIR=/dev/shm; fi
export TMPDIR=${FUZZ_TMPDIR:-${TMPDIR:-/tmp}}
name=$1
secs=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
bin=$PWD/build-fuzz/fuzz/fuzz_$name
[ -x "$bin" ] || fuzz/build.sh
mkdir -p "build-fuzz/corpus/$name" "build-fuzz/artifacts/$name" build-fuzz/logs "fuzz/corpus/$name"
seeds=$PWD/fuzz/corpus/$name
cd build-fuzz/logs
exec nice -n 10 "$bin" -max_total_time="$secs" -rss_limit_mb=2560 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="../artifacts/$name/" "$@" \
    "../corpus/$name" "$seeds"
