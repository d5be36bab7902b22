#!/usr/bin/env bash
# Builds the libFuzzer harnesses fuzz/fuzz_*.c into build-fuzz/fuzz/: the engine and the daemon
# compiled with clang, -fsanitize=fuzzer-no-link,address,undefined, by the Makefile's own rules
# (BUILD=build-fuzz FUZZ=1: objects are rebuilt when a source or a header they include changed), and
# each harness linked with libFuzzer. Fails when anything fails to compile or link.
# clang is a developer tool here, not a build dependency: installed on demand when missing (root).
#   make fuzz          this
#   fuzz/run.sh NAME SECONDS    one harness on a scratch copy of its corpus
#   make fuzz-check    every harness on its corpus plus a short run (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "fuzz: installing clang (needs root)" >&2
    if [ "$(id -u)" != 0 ]; then echo "fuzz: run as root, or: sudo apt-get install clang" >&2; exit 1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang >&2 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang >&2; }
fi
exec make -j"${FUZZ_JOBS:-2}" BUILD=build-fuzz CC="$CC" SAN=address,undefined OPT=-O1 FUZZ=1 \
    GIT_REV=fuzz fuzz-bins "$@"
