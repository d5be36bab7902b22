#!/usr/bin/env bash
# test_golden_blas.sh - the torch golden cases (test_golden: every kernel path) on the OpenBLAS core
# that `make test`'s own run of test_golden did not use: OPENBLAS_CORETYPE=Haswell when the variable
# is unset (OpenBLAS then picks the CPU's own core, e.g. Cooperlake on Zen 4), and unset when it is
# set (CI machines may pin it). The generic path's GEMMs, and nothing else, run on OpenBLAS.
# A CPU without AVX2 cannot run the Haswell core: reported as SKIP.
set -u
cd "$(dirname "$0")/../.."
bin="${BUILD:-build}/tests/engine/test_golden"
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment: test_golden again with it unset"
    exec env -u OPENBLAS_CORETYPE "$bin"
fi
if ! grep -qw avx2 /proc/cpuinfo; then
    echo "SKIP OPENBLAS_CORETYPE=Haswell: this CPU lacks AVX2"
    echo "0 passed, 0 failed"
    exit 0
fi
echo "test_golden again with OPENBLAS_CORETYPE=Haswell"
OPENBLAS_CORETYPE=Haswell exec "$bin"
