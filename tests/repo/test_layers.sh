#!/usr/bin/env bash
# test_layers.sh - the layering check (scripts/check_layers.sh) passes on the tree as it is, and fails
# on scratch copies where an include goes up a layer, goes sideways (http <-> codec), names a file
# that does not exist, or closes a circle - so the check itself cannot pass by accident.
set -u
cd "$(dirname "$0")/../.."
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "test_layers.sh: FAIL: $*"; fail=$((fail + 1)); }

out=$(scripts/check_layers.sh 2>&1)
if [ $? -eq 0 ]; then ok; else bad "the tree breaks its layers:"; echo "$out"; fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fresh() { rm -rf "$scratch/t" && mkdir -p "$scratch/t" && cp -r lib server scripts "$scratch/t/"; }

# expect_fail NAME FILE LINE PATTERN: FILE gains LINE (an #include) and the check must fail, saying
# PATTERN
expect_fail() {
    local name=$1 file=$2 line=$3 pattern=$4
    fresh
    printf '%s\n' "$line" >>"$scratch/t/$file"
    local msg
    msg=$(bash "$scratch/t/scripts/check_layers.sh" "$scratch/t" 2>&1)
    if [ $? -eq 0 ]; then
        bad "$name: the check passed"
    elif ! grep -q "$pattern" <<<"$msg"; then
        bad "$name: the check failed without saying '$pattern': $msg"
    else
        ok
    fi
}

expect_fail "store includes api (up)" server/store/registry.c '#include "api/forward.h"' \
    'server/store may not include server/api'
expect_fail "lib includes server (up)" lib/mha_layer.c '#include "base/error.h"' \
    'lib may not include server/base'
expect_fail "http includes codec (sideways)" server/http/route.c '#include "codec/tensor.h"' \
    'server/http may not include server/codec'
expect_fail "codec includes http (sideways)" server/codec/base64.c '#include "http/cors.h"' \
    'server/codec may not include server/http'
expect_fail "an include of no file" server/api/routes.c '#include "api/no_such.h"' \
    'no file of lib/ or server/'
# a circle inside one layer: every include is allowed, but tensor and predecode need each other
expect_fail "a circle" server/codec/predecode.c '#include "tensor.h"' 'a circle of includes'

# a file in a folder that is no layer
fresh
mkdir -p "$scratch/t/server/misc" && echo '/* x */' >"$scratch/t/server/misc/x.c"
if bash "$scratch/t/scripts/check_layers.sh" "$scratch/t" >/dev/null 2>&1; then
    bad "a file outside every layer passed"
else
    ok
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
