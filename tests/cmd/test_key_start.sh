#!/usr/bin/env bash
# test_key_start.sh - a key no client could ever match stops the daemon at start, from every source
# (ATTND_API_KEY, --api-key, --api-key-file), with exit status 2 and a message that says why (and so
# does an ATTND_ISA the engine does not know) (a good key's file, CRLF
# line end included, is test_auth_metrics.c's). Runs the built binary ($BUILD/attnd) on port 0,
# loopback only; every case exits at once.
set -u
cd "$(dirname "$0")/../.."
bin=${BUILD:-build}/attnd
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "test_key_start.sh: FAIL: $*"; fail=$((fail + 1)); }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# refused WHAT PATTERN -- ENV... -- ARGS...: the daemon exits with status 2 (a bad option value, as
# docs/configuration.md says) within seconds, saying PATTERN
refused() {
    local what=$1 pattern=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local out rc
    out=$(env "${envs[@]}" timeout 10 "$bin" --host 127.0.0.1 --port 0 --log-format text "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
        bad "$what: the daemon started (exit $rc): $out"
    elif [ $rc -ne 2 ]; then
        bad "$what: exit status $rc, not 2 (a bad option value): $out"
    elif ! grep -q -- "$pattern" <<<"$out"; then
        bad "$what: refused without saying '$pattern': $out"
    else
        ok
    fi
}

refused "ATTND_API_KEY with a leading space" "starts with a space" ATTND_API_KEY=" s3cret" --
refused "ATTND_API_KEY with a trailing space" "ends with a space" ATTND_API_KEY="s3cret " --
refused "--api-key with a trailing space" "ends with a space" -- --api-key "s3cret "
refused "--api-key with a tab" "control character" -- --api-key $'s3\tcret'
printf ' s3cret\n' >"$scratch/lead"
refused "key file with a leading space" "starts with a space" -- --api-key-file "$scratch/lead"
printf 's3cret \r\n' >"$scratch/trail"
refused "key file with a space before its CRLF" "ends with a space" -- --api-key-file "$scratch/trail"
printf 's3\x01cret\n' >"$scratch/ctl"
refused "key file with a control byte" "control character" -- --api-key-file "$scratch/ctl"
# ATTND_ISA is the engine's, read by the daemon at start: a typo would lift the cap it meant to set
refused "ATTND_ISA misspelt" "ATTND_ISA: 'avx-2' is not generic, avx2 or avx512" ATTND_ISA=avx-2 --
refused "ATTND_ISA in capitals" "ATTND_ISA: 'AVX2'" ATTND_ISA=AVX2 --

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
