#!/usr/bin/env bash
# test_scale.sh - scale-out with the parts of docker/compose.yaml, outside containers (`make test-scale`).
#
# Three build/attnd processes on free loopback ports share one temporary data dir with --watch, behind
# nginx running docker/nginx.conf itself (replica addresses, listen port and file paths rewritten by sed;
# nothing under / is touched). It shows that:
#   - a layer created through nginx is served by every replica, with torch's numbers, identical bytes;
#   - replacing and deleting it through nginx reaches every replica within 2 s, and no replica ever
#     answers with anything but the old or the new state on the way (no half-written layer);
#   - a replica killed with SIGKILL in the middle of a burst costs no failed request: nginx retries it
#     on the others.
# Also checks the deployment files (scripts/check_deploy_files.py: YAML of compose and k8s, nginx.conf).
# Ends with "N passed, N failed"; stops everything it started, by PID.
set -u
cd "$(dirname "$0")/.."

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

PIDS=()
T=""
cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    [ -n "$T" ] && rm -rf "$T"
}
trap cleanup EXIT
finish() {
    echo
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

# --- tools ---------------------------------------------------------------------------------------
missing=""
for p in nginx python3 python3-yaml curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        fail "missing Debian packages:$missing (run as root, or: sudo apt-get install$missing)"
        finish
    fi
    echo "installing:$missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null ||
        { fail "install$missing"; finish; }
    # Debian's nginx package starts a system-wide nginx on port 80; this test wants none of it.
    systemctl disable --now nginx >/dev/null 2>&1 || true
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
ATTND=${ATTND_BIN:-build/attnd}
[ -x "$ATTND" ] || { fail "$ATTND is built (make build/attnd)"; finish; }

# --- the deployment files -------------------------------------------------------------------------
if python3 scripts/check_deploy_files.py "$ATTND" >"${TMPDIR:-/tmp}/attnd-deploy-files.$$" 2>&1; then
    sed 's/^/    /' "${TMPDIR:-/tmp}/attnd-deploy-files.$$"
    pass "deployment files (compose, k8s, nginx.conf, Dockerfile) check out"
else
    sed 's/^/    /' "${TMPDIR:-/tmp}/attnd-deploy-files.$$"
    fail "deployment files (compose, k8s, nginx.conf, Dockerfile) check out"
fi
rm -f "${TMPDIR:-/tmp}/attnd-deploy-files.$$"

# --- three replicas on one data dir ----------------------------------------------------------------
T=$(mktemp -d /tmp/attnd-scale.XXXXXX)
chmod 755 "$T"
mkdir -p "$T/data" "$T/nginx"
read -r P1 P2 P3 PN < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
PORTS=("$P1" "$P2" "$P3")
URLS=()
for i in 0 1 2; do
    "$ATTND" --host 127.0.0.1 --port "${PORTS[$i]}" --data-dir "$T/data" --watch \
        >"$T/attnd$((i + 1)).log" 2>&1 &
    PIDS+=($!)
    URLS+=("http://127.0.0.1:${PORTS[$i]}")
done
APIDS=("${PIDS[@]}")

wait_http() { # wait_http URL SECONDS: until URL answers 2xx
    local n=$(($2 * 10))
    for _ in $(seq 1 "$n"); do
        curl -fsS -o /dev/null --max-time 1 "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
for i in 0 1 2; do
    if wait_http "${URLS[$i]}/healthz" 15; then pass "replica $((i + 1)) up on ${PORTS[$i]}"; else
        tail -5 "$T/attnd$((i + 1)).log"
        fail "replica $((i + 1)) up on ${PORTS[$i]}"
        finish
    fi
done

# --- nginx with docker/nginx.conf -----------------------------------------------------------------
sed -e "s#attnd1:8080#127.0.0.1:$P1#" -e "s#attnd2:8080#127.0.0.1:$P2#" -e "s#attnd3:8080#127.0.0.1:$P3#" \
    -e "s#listen 8080;#listen 127.0.0.1:$PN;#" \
    -e "s#/var/run/nginx.pid#$T/nginx/nginx.pid#" -e "s#/var/log/nginx#$T/nginx#g" \
    -e "s#/var/cache/nginx#$T/nginx#g" docker/nginx.conf >"$T/nginx/nginx.conf"
check "nginx.conf rewritten: three replicas, loopback listen, no system paths left" \
    test "$(grep -c "server 127.0.0.1:" "$T/nginx/nginx.conf")" = 3 -a \
    -z "$(grep -nE 'attnd[0-9]:|/var/|listen 8080' "$T/nginx/nginx.conf")"
# As root, nginx's workers run as nobody: let them write their temp files.
[ "$(id -u)" = 0 ] && chown -R nobody "$T/nginx"
if ! "$NGINX" -t -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" >"$T/nginx-t.log" 2>&1; then
    cat "$T/nginx-t.log"
    fail "nginx -t accepts docker/nginx.conf"
    finish
fi
pass "nginx -t accepts docker/nginx.conf"
"$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" -g 'daemon off;' &
PIDS+=($!)
LB=http://127.0.0.1:$PN
if wait_http "$LB/healthz" 10; then pass "nginx on $PN proxies /healthz"; else
    cat "$T/nginx/error.log"
    fail "nginx on $PN proxies /healthz"
    finish
fi

# --- create, replace, delete through nginx; every replica follows ---------------------------------
GC="python3 scripts/golden_client.py"
CASE=$(ls tests/golden/*bf_cross_heads*.json 2>/dev/null | head -1)
[ -z "$CASE" ] && CASE=$(ls tests/golden/*.json | head -1)
ALL=$(IFS=,; echo "${URLS[*]}")
# The digest of what nginx serves once it differs from $1 (right after a change, nginx may route to a
# replica that has not followed yet; polls for up to 2 s).
digest_not() {
    local d
    for _ in $(seq 1 100); do
        d=$($GC digest "$LB" scaled "$CASE") && [ "digest:$d" != "$1" ] && { echo "$d"; return 0; }
        sleep 0.02
    done
    return 1
}

check "PUT layer through nginx ($(basename "$CASE"))" $GC put "$LB" scaled "$CASE"
D0=$(digest_not absent)
check "every replica serves it within 2 s" $GC follow "$ALL" scaled "$CASE" "digest:$D0" 2 absent
for i in 0 1 2; do
    check "replica $((i + 1)) gives torch's numbers" $GC check "${URLS[$i]}" scaled "$CASE"
done
d=()
for i in 0 1 2; do d+=("$($GC digest "${URLS[$i]}" scaled "$CASE")"); done
check "replicas answer bit-identical outputs (${d[0]:0:12} ${d[1]:0:12} ${d[2]:0:12})" \
    test "${d[0]}" = "$D0" -a "${d[1]}" = "$D0" -a "${d[2]}" = "$D0"

check "PUT a replacement through nginx (weights × 1.125)" $GC put "$LB" scaled "$CASE" --variant 1
D1=$(digest_not "digest:$D0")
check "the replacement answers differently" test -n "$D1" -a "$D1" != "$D0"
check "every replica serves the replacement within 2 s, never anything else" \
    $GC follow "$ALL" scaled "$CASE" "digest:$D1" 2 "digest:$D0"

code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$LB/v1/layers/scaled")
check "DELETE through nginx answers 204 (got $code)" test "$code" = 204
check "every replica drops it within 2 s" $GC follow "$ALL" scaled "$CASE" absent 2 "digest:$D1"
check "the layer's directory is gone from the data dir" test ! -e "$T/data/layers/scaled"

# --- a replica dies mid-burst; nginx routes around it ---------------------------------------------
check "PUT the layer again" $GC put "$LB" scaled "$CASE"
check "every replica serves it again" $GC follow "$ALL" scaled "$CASE" "digest:$D0" 2 absent
check "1000 forwards through nginx, replica 2 SIGKILLed after 300: no failed request" \
    $GC burst "$LB" scaled "$CASE" 1000 "digest:$D0" "${APIDS[1]}" 300
{ wait "${APIDS[1]}"; } 2>/dev/null
retried=$(grep -cE 'upstream|connect\(\) failed' "$T/nginx/error.log")
check "nginx met the dead replica and retried elsewhere ($retried upstream errors in its log)" test "$retried" -gt 0
if curl -s -o /dev/null --max-time 1 "${URLS[1]}/healthz"; then
    fail "replica 2 is really gone"
else
    pass "replica 2 is really gone"
fi
check "after the kill, 200 more forwards through nginx all succeed" \
    $GC burst "$LB" scaled "$CASE" 200 "digest:$D0"
check "the two survivors still follow a change (DELETE through nginx)" \
    test "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$LB/v1/layers/scaled")" = 204
check "... within 2 s" $GC follow "${URLS[0]},${URLS[2]}" scaled "$CASE" absent 2 "digest:$D0"

finish
