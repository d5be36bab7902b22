#!/usr/bin/env bash
# Runs one harness for SECONDS (default 60) at low priority, on a scratch copy of its seed corpus
# (build-fuzz/corpus/NAME, which keeps what the fuzzer finds between runs), with crash reproducers
# written to build-fuzz/artifacts/NAME/. Extra arguments go to libFuzzer.
#   fuzz/run.sh tensor_parse 300
#   build-fuzz/fuzz/fuzz_tensor_parse build-fuzz/artifacts/tensor_parse/crash-...   (reproduce)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
secs=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
bin=build-fuzz/fuzz/fuzz_$name
[ -x "$bin" ] || fuzz/build.sh
mkdir -p "build-fuzz/corpus/$name" "build-fuzz/artifacts/$name"
exec nice -n 10 "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name/" "$@" \
    "build-fuzz/corpus/$name" "fuzz/corpus/$name"
