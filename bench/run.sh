#!/usr/bin/env bash
# bench/run.sh - `make bench`:
#   1. bench/compare.py: attnd's engine (and its attention core alone) against this machine's FMA peak,
#      OpenBLAS sgemm, torch, ONNX Runtime's fused MultiHeadAttention and the graph torch.onnx.export
#      writes, interleaved in one run, on S, M, L and XL with 1 and 2 threads, with and without
#      per-head weights (its arguments: COMPARE_ARGS, e.g. COMPARE_ARGS="--shapes L,XL --rounds 5");
#   2. build/bench/bench_engine on the sequence-first shapes Lseq8 and Mseq64, with torch's times on
#      the same shapes measured in the same run when /usr/bin/python3 has torch (arguments of this
#      script go to bench_engine, e.g. --shapes S,M --threads 1);
#   3. build/bench/bench_engine on the attention of today's models (grouped-query attention, RoPE,
#      ALiBi, sliding windows, Llama- and Mistral-sized layers), each row next to its plain pass,
#      on 2 threads (VARIANT_SHAPES overrides the rows);
#   4. any other bench/run_*.sh scripts (HTTP, codec, /v2).
# scripts/bench_deps.sh (run by the Makefile first) installs the peers when they are missing.
#
# OpenBLAS kernels: when the operator's OPENBLAS_CORETYPE pins a core other than the one OpenBLAS
# picks for this CPU by itself, the engine's L and XL rows are measured a second time with the
# variable unset, so both kernel sets show (the operator's setting is used for everything else).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
# An OpenBLAS that does not know the CPU's model falls back to an older core (Debian 12's takes an
# Emerald Rapids Xeon for a Prescott): torch then runs as no user who set OPENBLAS_CORETYPE would.
operator_pin=${OPENBLAS_CORETYPE:-}
if [ -z "$operator_pin" ]; then
    fix=$("$BUILD/bench/bench_engine" --core-fix 2>/dev/null)
    if [ -n "$fix" ]; then
        echo "OpenBLAS does not know this CPU and fell back to $("$BUILD/bench/bench_engine" --core): OPENBLAS_CORETYPE=$fix for every contender"
        export OPENBLAS_CORETYPE=$fix
    fi
fi
echo "== attnd against the FMA peak, OpenBLAS, torch and ONNX Runtime (bench/compare.py)"
# shellcheck disable=SC2086
python3 bench/compare.py ${COMPARE_ARGS:-} || echo "bench/compare.py failed" >&2

echo
echo "== the engine alone on sequence-first shapes (bench/bench_engine.c)"
engine_args=("$@")
[ ${#engine_args[@]} -eq 0 ] && engine_args=(--shapes Lseq8,Mseq64)
torch_file=$(mktemp)
trap 'rm -f "$torch_file"' EXIT
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "timing torch (1 and 2 threads) ..."
    for t in 1 2; do
        OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_time.py \
            --threads $t --shapes Lseq8,Mseq64 >>"$torch_file" || echo "torch timing failed for $t threads" >&2
    done
else
    echo "(no torch in /usr/bin/python3: torch columns left empty)"
fi
"$BUILD/bench/bench_engine" --torch "$torch_file" "${engine_args[@]}"
if [ -n "$operator_pin" ]; then
    pinned=$("$BUILD/bench/bench_engine" --core)
    auto=$(env -u OPENBLAS_CORETYPE "$BUILD/bench/bench_engine" --core)
    if [ "$pinned" != "$auto" ]; then
        echo
        echo "=== again with OPENBLAS_CORETYPE unset: OpenBLAS picks $auto kernels instead of $pinned ==="
        env -u OPENBLAS_CORETYPE "$BUILD/bench/bench_engine" --shapes L,XL
    fi
fi
echo
echo "== the attention of today's models: GQA, RoPE, ALiBi, windows (bench/bench_engine.c)"
"$BUILD/bench/bench_engine" --threads 2 --shapes \
    "${VARIANT_SHAPES:-L-rope,L-alibi,L-causal,L-cwin,XL-rope,XL-alibi,XL-causal,XL-cwin,XL-w128,XLa-causal,XLa-w128,Llama,Mistral}"
for extra in bench/run_*.sh; do
    [ -x "$extra" ] && "$extra"
done
exit 0
