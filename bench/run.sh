#!/usr/bin/env bash
# bench/run.sh - `make bench`: the engine benchmark (build/bench/bench_engine), with torch's times
# on the same shapes measured in the same run when /usr/bin/python3 has torch. Arguments go to
# bench_engine (e.g. --shapes S,M --threads 1). Any other bench/run_*.sh scripts run afterwards.
#
# OpenBLAS kernels: when OPENBLAS_CORETYPE is set and pins a core other than the one OpenBLAS
# picks for this CPU by itself, the L and XL rows are measured a second time with the variable
# unset, so both kernel sets show (the operator's setting is used for everything else).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
torch_file=$(mktemp)
trap 'rm -f "$torch_file"' EXIT
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "timing torch (1 and 2 threads) ..."
    for t in 1 2; do
        OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t /usr/bin/python3 bench/torch_time.py --threads $t >>"$torch_file" ||
            echo "torch timing failed for $t threads" >&2
    done
else
    echo "(no torch in /usr/bin/python3: torch columns left empty)"
fi
"$BUILD/bench/bench_engine" --torch "$torch_file" "$@"
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    pinned=$("$BUILD/bench/bench_engine" --core)
    auto=$(env -u OPENBLAS_CORETYPE "$BUILD/bench/bench_engine" --core)
    if [ "$pinned" != "$auto" ]; then
        echo
        echo "=== again with OPENBLAS_CORETYPE unset: OpenBLAS picks $auto kernels instead of $pinned ==="
        echo "    (torch columns are torch under OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, from the run above)"
        env -u OPENBLAS_CORETYPE "$BUILD/bench/bench_engine" --torch "$torch_file" --shapes L,XL "$@"
    fi
fi
for extra in bench/run_*.sh; do
    [ -x "$extra" ] && "$extra"
done
exit 0
