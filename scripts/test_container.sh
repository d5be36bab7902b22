#!/usr/bin/env bash
# test_container.sh - builds the Dockerfile with podman and checks the image for real (`make test-container`).
#
# No Docker engine and no image registry here: Debian's podman builds the Dockerfile unchanged, on a
# debian:bookworm-slim base made locally with debootstrap (cached as a podman image; built once per
# machine, about a minute). This sandbox needs runc (crun fails), explicit ulimits and host networking.
# Checks: the image builds; /healthz answers; the HEALTHCHECK command passes (and fails against a wrong
# port); a layer created through the API serves torch's numbers (a committed golden case); the layer is
# written to the /data volume and survives a restart; two replicas with a read-only root fs share a named
# volume with --watch and follow each other; the daemon runs as non-root; the image holds no
# compiler; SIGTERM stops it cleanly (exit 0) within its grace period. Prints the image size.
# Ends with "N passed, N failed"; removes the containers and volume it made (the images stay, as a cache).
# Run as root (podman is used rootful, as in CI).
set -u
cd "$(dirname "$0")/.."

IMAGE=${ATTND_TEST_IMAGE:-localhost/attnd:test}
BASE=docker.io/library/debian:bookworm-slim
GRACE=10 # seconds podman stop waits before SIGKILL

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
check() { # check "description" command...
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
    echo
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

if [ "$(id -u)" != 0 ]; then
    echo "test_container.sh: needs root (rootful podman, apt-get for podman/runc/debootstrap)" >&2
    fail "running as root"
    finish
fi

# --- tools ---------------------------------------------------------------------------------------
missing=""
for p in podman runc debootstrap python3 curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null ||
        { fail "install$missing"; finish; }
fi

T=$(mktemp -d /tmp/attnd-container.XXXXXX)
CID=""
PAIR=()      # the two replica containers
VOL=""       # their shared named volume
cleanup() {
    [ -n "$CID" ] && podman --runtime /usr/sbin/runc rm -f -v -t 0 "$CID" >/dev/null 2>&1
    for c in "${PAIR[@]}"; do podman --runtime /usr/sbin/runc rm -f -t 0 "$c" >/dev/null 2>&1; done
    [ -n "$VOL" ] && podman volume rm -f "$VOL" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

printf '[containers]\ndefault_ulimits = []\n' >"$T/containers.conf"
export CONTAINERS_CONF=$T/containers.conf
P="podman --runtime /usr/sbin/runc"
U="--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"

# --- the base image: debootstrap once, then cached in podman's store --------------------------------
# The mirror is the one apt on this machine uses (first Debian URI in its sources).
apt_mirror() {
    local m
    m=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' |
        grep -v -- '-security' | grep -m1 debian)
    [ -z "$m" ] && m=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' |
        grep -v -- '-security' | grep -m1 debian)
    echo "${m:-http://deb.debian.org/debian}"
}
if $P image exists "$BASE"; then
    pass "base image $BASE (cached)"
else
    mirror=$(apt_mirror)
    echo "making $BASE with debootstrap from $mirror (about a minute) ..."
    rootfs=$(mktemp -d /var/tmp/attnd-rootfs.XXXXXX)
    t0=$(date +%s)
    if debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$T/debootstrap.log" 2>&1; then
        # Trim it the way the real bookworm-slim is trimmed: no docs, man pages, locales, apt caches.
        rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
            "$rootfs"/usr/share/locale/* "$rootfs"/var/cache/apt/*.bin \
            "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
        printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
            'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
            'path-exclude /usr/share/locale/*' >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim"
        if tar -C "$rootfs" -c . | $P import - "$BASE" >"$T/import.log" 2>&1; then
            pass "base image $BASE made in $(($(date +%s) - t0)) s"
        else
            fail "podman import of the debootstrap rootfs"
        fi
    else
        tail -20 "$T/debootstrap.log"
        fail "debootstrap bookworm from $mirror"
    fi
    rm -rf "$rootfs"
    $P image exists "$BASE" || finish
fi

# --- build ---------------------------------------------------------------------------------------
# --format docker keeps HEALTHCHECK (the OCI image format has no field for it; podman would drop it).
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
t0=$(date +%s)
if $P build --pull=never --network=host $U --format docker --build-arg GIT_REV="$rev" \
    -t "$IMAGE" . >"$T/build.log" 2>&1; then
    pass "image builds ($(($(date +%s) - t0)) s)"
else
    tail -40 "$T/build.log"
    fail "image builds"
    finish
fi
size=$($P image inspect --format '{{.Size}}' "$IMAGE")
base_size=$($P image inspect --format '{{.Size}}' "$BASE")
echo "image size: $((size / 1000000)) MB ($IMAGE; base $BASE: $((base_size / 1000000)) MB)"

# --- what the image declares -----------------------------------------------------------------------
cfg=$($P image inspect --format '{{json .Config}}' "$IMAGE")
hc=$($P image inspect --format '{{json .HealthCheck}}' "$IMAGE" 2>/dev/null)
check "image user is non-root (User: $(echo "$cfg" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("User"))'))" \
    python3 -c 'import json,sys; u=str(json.load(sys.stdin).get("User") or "0").split(":")[0]; sys.exit(u in ("0","root",""))' <<<"$cfg"
check "image exposes 8080, listens on 0.0.0.0, data dir /data" \
    python3 -c 'import json,sys; c=json.load(sys.stdin); e=c.get("Env") or []
sys.exit(not ("8080/tcp" in (c.get("ExposedPorts") or {}) and "ATTND_HOST=0.0.0.0" in e and "ATTND_DATA_DIR=/data" in e and "/data" in (c.get("Volumes") or {})))' <<<"$cfg"
check "image HEALTHCHECK runs attnd --healthcheck ($hc)" grep -q '"attnd","--healthcheck"' <<<"${hc// /}"
check "image stop signal is SIGTERM" grep -q '"StopSignal":"SIGTERM"' <<<"${cfg// /}"

# --- no compiler in the runtime image -------------------------------------------------------------
tools=$($P run --rm $U --network=host --no-healthcheck --entrypoint sh "$IMAGE" -c \
    'for c in gcc cc c99 c89 g++ c++ clang tcc as ld make; do command -v $c; done;
     dpkg-query -W -f="\${Package}\n" | grep -E "^(gcc|g\+\+|cpp|clang|tcc|binutils|libc6-dev|make)(-[0-9.]+)?$"' 2>/dev/null)
check "runtime image holds no compiler, assembler, linker or -dev libc${tools:+ (found: $tools)}" test -z "$tools"

# --- run ------------------------------------------------------------------------------------------
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$port
CID=$($P run -d --network=host $U -e ATTND_PORT="$port" --name "attnd-test-$$" "$IMAGE" 2>"$T/run.err")
if [ -z "$CID" ]; then
    cat "$T/run.err"
    fail "container starts"
    finish
fi
up=0
for _ in $(seq 1 150); do # up to 15 s for the daemon to listen
    if curl -fsS -o /dev/null --max-time 1 "$URL/healthz" 2>/dev/null; then up=1; break; fi
    [ "$($P inspect --format '{{.State.Running}}' "$CID")" = true ] || break
    sleep 0.1
done
if [ "$up" = 1 ]; then pass "container serves /healthz on port $port"; else
    $P logs "$CID" 2>&1 | tail -20
    fail "container serves /healthz on port $port"
    finish
fi
check "/readyz answers 200" curl -fsS -o /dev/null --max-time 5 "$URL/readyz"

check "HEALTHCHECK command passes (attnd --healthcheck in the container)" \
    $P exec "$CID" attnd --healthcheck
check "podman healthcheck run reports healthy" $P healthcheck run "$CID"
if $P exec "$CID" attnd --healthcheck --port 1 2>/dev/null; then
    fail "attnd --healthcheck fails against a port nobody listens on"
else
    pass "attnd --healthcheck fails against a port nobody listens on"
fi

uid=$($P exec "$CID" sh -c 'awk "/^Uid:/{print \$2}" /proc/1/status')
check "daemon process runs as non-root (uid $uid)" test -n "$uid" -a "$uid" != 0

# --- a layer through the API gives torch's numbers ----------------------------------------------
case_file=$(ls tests/golden/*bf_cross_heads*.json 2>/dev/null | head -1)
[ -z "$case_file" ] && case_file=$(ls tests/golden/*.json 2>/dev/null | head -1)
if [ -z "$case_file" ]; then
    fail "a torch golden case in tests/golden/"
else
    check "PUT a layer from $(basename "$case_file")" python3 scripts/golden_client.py put "$URL" golden "$case_file"
    check "forward matches torch within 2e-5 + 1e-4 rel" python3 scripts/golden_client.py check "$URL" golden "$case_file"
    check "layer written to the /data volume" \
        $P exec "$CID" test -s /data/layers/golden/config.json -a -s /data/layers/golden/weights.safetensors
fi

# --- SIGTERM: clean exit within the grace period -------------------------------------------------
t0=$(date +%s%N)
$P stop -t "$GRACE" "$CID" >/dev/null 2>&1
ms=$((($(date +%s%N) - t0) / 1000000))
code=$($P inspect --format '{{.State.ExitCode}}' "$CID")
check "SIGTERM stops it in ${ms} ms (grace ${GRACE} s) with exit status $code" \
    test "$code" = 0 -a "$ms" -lt $((GRACE * 1000))

# --- the volume keeps the layer across a restart ------------------------------------------------
if [ -n "$case_file" ]; then
    $P start "$CID" >/dev/null 2>&1
    up=0
    for _ in $(seq 1 150); do
        curl -fsS -o /dev/null --max-time 1 "$URL/healthz" 2>/dev/null && { up=1; break; }
        sleep 0.1
    done
    check "after a restart the layer is loaded from /data and still matches torch" \
        test "$up" = 1 -a "$(python3 scripts/golden_client.py check "$URL" golden "$case_file" >&2; echo $?)" = 0
    $P stop -t "$GRACE" "$CID" >/dev/null 2>&1
fi

# --- two replicas on one named volume, as compose runs them: read-only root fs, --watch ----------
if [ -n "$case_file" ]; then
    VOL="attnd-test-data-$$"
    $P volume create "$VOL" >/dev/null 2>&1
    read -r q1 q2 < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
    for q in "$q1" "$q2"; do
        c=$($P run -d --network=host $U --read-only --tmpfs /tmp --cap-drop ALL \
            --security-opt no-new-privileges -v "$VOL:/data" -e ATTND_PORT="$q" -e ATTND_WATCH=1 \
            --name "attnd-test-$$-$q" "$IMAGE" 2>>"$T/run.err")
        [ -n "$c" ] && PAIR+=("$c")
    done
    up=0
    for _ in $(seq 1 150); do
        curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$q1/healthz" 2>/dev/null &&
            curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$q2/healthz" 2>/dev/null && { up=1; break; }
        sleep 0.1
    done
    check "two replicas (read-only root, no capabilities) share a named volume" test "$up" = 1 -a "${#PAIR[@]}" = 2
    if [ "$up" = 1 ]; then
        check "PUT through replica 1 (the volume is writable by the non-root user)" \
            python3 scripts/golden_client.py put "http://127.0.0.1:$q1" shared "$case_file"
        d=$(python3 scripts/golden_client.py digest "http://127.0.0.1:$q1" shared "$case_file")
        check "replica 2 (--watch) serves it within 2 s" python3 scripts/golden_client.py follow \
            "http://127.0.0.1:$q2" shared "$case_file" "digest:$d" 2 absent
        check "replica 2 gives torch's numbers" \
            python3 scripts/golden_client.py check "http://127.0.0.1:$q2" shared "$case_file"
        code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$q2/v1/layers/shared")
        check "DELETE through replica 2 ($code); replica 1 drops it within 2 s" \
            python3 scripts/golden_client.py follow "http://127.0.0.1:$q1" shared "$case_file" absent 2 "digest:$d"
    fi
fi

echo "image size: $((size / 1000000)) MB"
finish
