#!/usr/bin/env bash
# scripts/bench_deps.sh - installs what `make bench` and `make bench-long` compare attnd against,
# when it is missing; never fails the benchmark: a peer that cannot be installed is reported and
# the benchmark prints "skipped: why" in its place.
#
#   Debian packages: python3-torch (torch 1.13, the reference), python3-onnx (builds the ONNX models),
#                    libxsmm-dev (JIT GEMM kernels), nodejs and npm (for onnxruntime-node)
#   npm:             onnxruntime-node $ORT_VERSION into $BUILD/npm (its cache in $BUILD/npm/cache),
#                    never into the repository. ONNXRUNTIME_NODE_INSTALL=skip: its install script
#                    would otherwise fetch CUDA binaries; the CPU runtime ships in the npm package.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ORT_VERSION=${ORT_VERSION:-1.30.0}

missing=""
for p in python3-torch python3-onnx libxsmm-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "bench: not root, cannot install:$missing (sudo apt-get install$missing); those peers are skipped"
    else
        echo "bench: installing missing Debian packages:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt_get() { apt-get -q -o DPkg::Lock::Timeout=600 "$@"; }
        # one package at a time, so one that cannot be installed does not keep out the others
        apt_get update >/dev/null 2>&1 || echo "bench: apt-get update failed; trying the cached lists"
        for p in $missing; do
            apt_get install -y --no-install-recommends "$p" >/dev/null 2>&1 ||
                echo "bench: apt-get install $p failed; the peers needing it are skipped"
        done
    fi
fi

ORT_DIR="$BUILD/npm"
if [ -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ] &&
    grep -q "\"version\": \"$ORT_VERSION\"" "$ORT_DIR/node_modules/onnxruntime-node/package.json"; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "bench: no npm, so no onnxruntime-node; the ONNX Runtime peers are skipped"
    exit 0
fi
echo "bench: npm install onnxruntime-node@$ORT_VERSION into $ORT_DIR"
mkdir -p "$ORT_DIR"
[ -f "$ORT_DIR/package.json" ] || echo '{"name": "attnd-bench-peers", "private": true}' >"$ORT_DIR/package.json"
if ! ONNXRUNTIME_NODE_INSTALL=skip npm install --prefix "$ORT_DIR" --cache "$ORT_DIR/cache" \
    --no-audit --no-fund --loglevel=error "onnxruntime-node@$ORT_VERSION" >"$ORT_DIR/install.log" 2>&1; then
    echo "bench: npm install onnxruntime-node failed (see $ORT_DIR/install.log); the ONNX Runtime peers are skipped"
fi
exit 0
