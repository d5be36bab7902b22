#!/usr/bin/env bash
# bench/run_http.sh - the daemon over loopback HTTP (run by `make bench` after the engine benchmark).
#
# Starts build/attnd on a free port (127.0.0.1 only), creates the layers of issue 3's speed section,
#   S: N=1 L=32  E=64  H=4,  need_weights, per-head weights     (wrk, 8 connections)
#   M: N=1 L=128 E=512 H=8,  no weights                         (wrk, 8 connections)
#   L: N=8 L=512 E=768 H=12, no weights, one request at a time  (curl: nested JSON, then base64;
#      base64 again through bench_http_post, libcurl with bulk-sized buffers)
# and prints requests/s, latency, and the daemon's CPU time per request (user+sys from /proc, which
# stays meaningful when other work shares the machine). Knobs: DURATION=4 (s per wrk run),
# CONNS=8, L_REPEATS=3, ATTND_* variables for the daemon. Stops the daemon it started (by PID).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DURATION=${DURATION:-4}
CONNS=${CONNS:-8}
L_REPEATS=${L_REPEATS:-3}
WORK=$(mktemp -d /tmp/attnd_bench_http.XXXXXX)
PID=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

echo
echo "== HTTP benchmark (bench/run_http.sh)"
command -v curl >/dev/null || { echo "curl missing: skipped"; exit 0; }
"$BUILD/attnd" --port 0 --log-format text 2>"$WORK/log" &
PID=$!
for _ in $(seq 100); do
    PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$WORK/log" | head -1)
    [ -n "$PORT" ] && break
    sleep 0.05
done
[ -n "${PORT:-}" ] || { echo "attnd did not start"; cat "$WORK/log"; exit 1; }
URL=http://127.0.0.1:$PORT
J='Content-Type: application/json'

python3 - "$WORK" <<'PY'
import base64, json, random, struct, sys
w = sys.argv[1]
rnd = random.Random(0)
def q(n, l, e):
    return [[[round(rnd.gauss(0, 1), 6) for _ in range(e)] for _ in range(l)] for _ in range(n)]
json.dump({"query": q(1, 32, 64), "need_weights": True, "average_attn_weights": False}, open(w + "/S.json", "w"))
json.dump({"query": q(1, 128, 512)}, open(w + "/M.json", "w"))
lq = q(8, 512, 768)
json.dump({"query": lq}, open(w + "/L.json", "w"))
flat = [x for a in lq for b in a for x in b]
b64 = base64.b64encode(struct.pack("<%df" % len(flat), *flat)).decode()
json.dump({"query": {"shape": [8, 512, 768], "dtype": "float32", "base64": b64}, "encoding": "base64"},
          open(w + "/L64.json", "w"))
PY
for spec in S:64:4 M:512:8 L:768:12; do
    IFS=: read -r name e h <<<"$spec"
    # batch_first, as the peers' layers and bench_engine: [N,L,E] (torch's default would read the
    # L query [8,512,768] as 8 positions of a batch of 512, a different pass from the engine's L)
    curl -sf -X PUT -H "$J" -d "{\"config\": {\"embed_dim\": $e, \"num_heads\": $h, \"batch_first\": true}}" \
        "$URL/v1/layers/$name" >/dev/null || { echo "PUT $name failed"; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
HZ=$(getconf CLK_TCK)

cat >"$WORK/post.lua" <<'LUA'
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA

printf "%-28s %12s %12s %14s\n" "case" "req/s" "latency" "cpu/request"
if command -v wrk >/dev/null; then
    for name in S M; do
        t0=$(cpu_ticks)
        out=$(BODY_FILE="$WORK/$name.json" wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$WORK/post.lua" \
            "$URL/v1/layers/$name/forward")
        t1=$(cpu_ticks)
        rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
        lat=$(echo "$out" | awk '/Latency/ {print $2; exit}')
        total=$(echo "$out" | awk '/requests in/ {print $1}')
        cpu=$(awk -v a="$t0" -v b="$t1" -v n="$total" -v hz="$HZ" 'BEGIN {printf "%.0f us", (b - a) / hz / n * 1e6}')
        printf "%-28s %12s %12s %14s\n" "$name forward c=$CONNS" "$rps" "$lat" "$cpu"
    done
else
    echo "(wrk not installed: S and M throughput skipped; apt-get install wrk)"
fi
for form in L L64; do
    for _ in $(seq "$L_REPEATS"); do
        # time_total, and the pass's own time from the reply's Server-Timing header
        curl -s -o /dev/null -D "$WORK/headers" -w '%{time_total}' -X POST -H "$J" -H 'Expect:' \
            --data-binary @"$WORK/$form.json" "$URL/v1/layers/L/forward"
        sed -n 's/.*pass;dur=\([0-9.]*\).*/ \1/p' "$WORK/headers" | tr -d '\r\n'
        echo
    done | sort -n | awk -v f="$form" -v sz="$(stat -c %s "$WORK/$form.json")" '
        {t[NR] = $1; p[NR] = $2}
        END {m = int((NR + 1) / 2)
             printf "%-28s %12s %11.3fs %14s\n", (f == "L" ? "L one request, JSON" : "L one request, base64") " (" int(sz / 1e6) " MB)", "", t[m], "(median)"
             if (f == "L64") printf "L base64: the pass inside that request took %.1f ms (Server-Timing): request / pass = %.2fx\n", p[m], t[m] * 1000 / p[m]}' |
        tee -a "$WORK/L_times"
done
# The same base64 request from a client that moves bulk data efficiently (libcurl, 2 MB upload and
# 1 MB download buffers): the curl command line spends ~18 ms of its request on its own 64 KB sends and
# 100 KB reads, on the same two cores; this shows how much of the request is the daemon's.
lib_ms=
if [ -x "$BUILD/bench/bench_http_post" ]; then
    lib=$("$BUILD/bench/bench_http_post" "$URL/v1/layers/L/forward" "$WORK/L64.json" --repeats "$L_REPEATS" | tail -1)
    lib_ms=$(echo "$lib" | sed -n 's/^median: total \([0-9.]*\) ms.*/\1/p')
    printf "%-28s %12s %11.3fs %14s\n" "L base64, libcurl 2MB buffers" "" "$(awk -v m="${lib_ms:-0}" 'BEGIN {print m / 1000}')" "(median)"
    echo "  bench_http_post $lib"
fi
# Issue 3 asks for the base64 L request within 1.3x of the engine's compute time: the same pass,
# in process, with the daemon's thread count, measured right after (same machine state).
if [ -x "$BUILD/bench/bench_engine" ]; then
    eng=$("$BUILD/bench/bench_engine" --shapes L --threads "${ATTND_BLAS_THREADS:-$(nproc)}" --min-time 1 |
        awk '$1 == "L" && $4 == "nw0" {print $5; exit}')
    b64=$(awk '/one request, base64/ {sub("s", "", $(NF-1)); print $(NF-1)}' "$WORK/L_times")
    [ -n "$eng" ] && [ -n "$b64" ] &&
        awk -v e="$eng" -v b="$b64" -v l="$lib_ms" 'BEGIN {
            printf "L engine compute alone: %.3fs; base64 request / compute (goal <= 1.3x): curl command line %.2fx", e / 1000, b / (e / 1000)
            if (l != "") printf ", libcurl with bulk buffers %.2fx", l / e
            printf "\n"}'
fi
echo "daemon log: per-request server time (ms) of the L requests:"
grep "/v1/layers/L/forward" "$WORK/log" | awk '{print "  " $NF}' | tr '\n' ' '
echo
exit 0
