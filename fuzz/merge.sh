#!/usr/bin/env bash
# Folds what runs found (build-fuzz/corpus/NAME) and any extra seed dirs given into the committed
# corpus fuzz/corpus/NAME, minimised: libFuzzer's -merge=1 keeps the smallest set of inputs that
# covers every feature any of them covers, and the committed corpus is replaced by that set.
#   fuzz/merge.sh http                 after fuzz/run.sh http 600
#   fuzz/merge.sh http /tmp/seeds      with new seeds (fuzz/seeds.py writes them)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
shift
bin=$PWD/build-fuzz/fuzz/fuzz_$name
[ -x "$bin" ] || fuzz/build.sh
tmp=build-fuzz/merge/$name
rm -rf "$tmp"
mkdir -p "$tmp" build-fuzz/logs "build-fuzz/corpus/$name" "fuzz/corpus/$name"
srcs=("$PWD/fuzz/corpus/$name" "$PWD/build-fuzz/corpus/$name")
for d in "$@"; do srcs+=("$(cd "$d" && pwd)"); done
(cd build-fuzz/logs && nice -n 10 "$bin" -merge=1 -rss_limit_mb=2560 -malloc_limit_mb=2048 -timeout=30 \
    "$OLDPWD/$tmp" "${srcs[@]}") 2>&1 | grep -E 'MERGE-OUTER|ERROR' || true
[ -n "$(ls -A "$tmp")" ] || { echo "merge: nothing left for $name (a crash?)" >&2; exit 1; }
rm -rf "fuzz/corpus/$name"
mv "$tmp" "fuzz/corpus/$name"
echo "fuzz/corpus/$name: $(ls "fuzz/corpus/$name" | wc -l) inputs, $(du -sk "fuzz/corpus/$name" | cut -f1) KB"
