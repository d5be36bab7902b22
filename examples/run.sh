#!/usr/bin/env bash
# run.sh - make test-examples: runs examples/client.py and examples/client.mjs against a daemon of
# this build on a free port of 127.0.0.1, and examples/openapi_check.py (the served openapi.yaml
# loaded as an OpenAPI tool loads it), after installing what they need when it is missing
# (Debian's python3-numpy, python3-requests, python3-yaml and nodejs; as root, else it says what to
# install).
# Ends with "N passed, N failed" over both; exit status 0 when both passed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3 # Debian's, where python3-numpy and python3-requests go

missing=""
for p in python3 python3-numpy python3-requests python3-yaml; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
command -v node >/dev/null || missing="$missing nodejs"
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "the examples need:$missing; run: sudo apt-get install$missing" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "installing missing Debian packages:$missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing || exit 1
fi
node_major=$(node -e 'console.log(process.versions.node.split(".")[0])')
if [ "$node_major" -lt 18 ]; then
    echo "examples/client.mjs needs Node 18 or later for fetch; this is $(node --version)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

log=$(mktemp)
"$BUILD/attnd" --host 127.0.0.1 --port 0 --threads 2 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 100); do
    port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$port" ]; then
    echo "attnd did not start:" >&2
    cat "$log" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
url="http://127.0.0.1:$port"

total_pass=0
total_fail=0
for run in "$PY examples/client.py $url" "node examples/client.mjs $url" \
    "$PY examples/openapi_check.py $url"; do
    echo "== $run"
    out=$($run 2>&1)
    rc=$?
    echo "$out"
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(echo "${line:-0 passed, 0 failed}" | awk '{print $1}')
    f=$(echo "${line:-0 passed, 0 failed}" | awk '{print $3}')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
done
echo
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
