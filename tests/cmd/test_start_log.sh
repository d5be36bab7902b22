#!/usr/bin/env bash
# test_start_log.sh - what the daemon's start says about settings that would otherwise pass without
# a word: an ATTND_* variable that is no setting (a misspelt twin, ATTND_PROT) is a warning naming
# it and the twin it is nearest; the engine's and the tools' own ATTND_* names are not; and a
# daemon without a data dir says that its layers live in memory only (--data-dir "$DIR" with DIR
# unset is an empty value). Runs the built binary ($BUILD/attnd) on port 0, loopback only, for a
# second each.
set -u
cd "$(dirname "$0")/../.."
bin=${BUILD:-build}/attnd
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "test_start_log.sh: FAIL: $*"; fail=$((fail + 1)); }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# start ENV... -- ARGS...: the daemon's log of one second (then SIGTERM; it drains and stops)
start() {
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout -s TERM 1 "$bin" --host 127.0.0.1 --port 0 --log-format text "$@" 2>&1
}

out=$(start ATTND_PROT=9 --)
if grep -q "warn: ATTND_PROT is not a setting of this daemon and is ignored; did you mean ATTND_PORT (--port)?" <<<"$out" &&
    grep -q "listening on" <<<"$out"; then ok; else bad "ATTND_PROT: no warning naming ATTND_PORT: $out"; fi

out=$(start ATTND_MAX_BODY=1M ATTND_PROT=9 --)
if grep -q "other ATTND_\* variables here are not settings either" <<<"$out"; then ok; else
    bad "two unknown variables: the warning does not say there are more: $out"; fi

out=$(start ATTND_ISA=avx2 ATTND_JIT=1 ATTND_URL=http://127.0.0.1:1 ATTND_TEST_GROUP_ROWS=0 ATTND_PORT=0 ATTND_LOG_FORMAT=text --)
if grep -q "listening on" <<<"$out" && ! grep -q "is not a setting" <<<"$out"; then ok; else
    bad "known ATTND_* names were warned about: $out"; fi

out=$(start --)
if grep -q "info: no data dir (--data-dir not given, or empty): layers live in memory only" <<<"$out"; then ok; else
    bad "no data dir: the log does not say layers live in memory only: $out"; fi
out=$(start -- --data-dir "")
if grep -q "no data dir" <<<"$out"; then ok; else bad "--data-dir '': no memory-only line: $out"; fi
out=$(start -- --data-dir "$scratch/dd")
if grep -q "data dir $scratch/dd: 0 layers loaded" <<<"$out" && ! grep -q "no data dir" <<<"$out"; then ok; else
    bad "a data dir: the log is not its line: $out"; fi

# a key from two sources: the file's is in force (docs/security.md), and the start says so
printf 'filekey\n' >"$scratch/key"
out=$(start ATTND_API_KEY=envkey -- --api-key-file "$scratch/key")
if grep -q "warn: ATTND_API_KEY (or --api-key) is ignored: the key in force is --api-key-file's" <<<"$out" &&
    grep -q "listening on" <<<"$out"; then ok; else bad "a key and a key file: no warning: $out"; fi
out=$(start ATTND_API_KEY=envkey --)
if ! grep -q "is ignored" <<<"$out"; then ok; else bad "one key: warned about: $out"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
