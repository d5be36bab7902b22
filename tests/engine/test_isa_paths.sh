#!/usr/bin/env bash
# test_isa_paths.sh - the engine's checks that run on the CPU's best kernels only (test_select: chosen
# weights against torch's goldens and the full map; test_engine), again on every lower kernel path
# this CPU has, by ATTND_ISA (SPEC §4): generic always, avx2 too under an AVX-512 CPU. (test_golden,
# test_engine_variants, test_engine_kernels, test_engine_softmax_block and test_select_runs loop over
# the paths themselves.) A path the CPU lacks is reported as skipped. Ends with the programs' sum.
set -u
cd "$(dirname "$0")/../.."
build="${BUILD:-build}/tests/engine"
has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }
args=()
if has avx512f; then
    lower="generic avx2"
elif has avx2 && has fma; then
    lower="generic"
    echo "SKIP avx512: this CPU lacks it (the plain runs use avx2)"
else
    lower="" # the portable kernels are this CPU's best: the plain runs cover them
    echo "SKIP avx2, avx512: this CPU lacks them (the plain runs use generic)"
fi
for isa in $lower; do
    args+=("ATTND_ISA=$isa" "$build/test_select" "$build/test_engine")
done
exec tests/run_tests.sh "${args[@]}"
