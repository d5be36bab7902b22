#!/usr/bin/env bash
# Regrows the committed corpora: fuzz/seeds.py writes seeds from the repository's real requests and
# files into build-fuzz/seeds/, then fuzz/merge.sh folds them, what fuzz/run.sh found
# (build-fuzz/corpus/NAME) and the committed corpus into a minimal fuzz/corpus/NAME per harness.
#   fuzz/reseed.sh              every harness
#   fuzz/reseed.sh http json_scan
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz/build.sh
rm -rf build-fuzz/seeds
python3 fuzz/seeds.py build-fuzz/seeds
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for h in fuzz/fuzz_*.c; do n=$(basename "$h" .c); names+=("${n#fuzz_}"); done
fi
for n in "${names[@]}"; do
    if [ -d "build-fuzz/seeds/$n" ]; then fuzz/merge.sh "$n" "build-fuzz/seeds/$n"; else fuzz/merge.sh "$n"; fi
done
