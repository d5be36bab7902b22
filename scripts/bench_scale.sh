#!/usr/bin/env bash
# bench_scale.sh - wrk on the S layer: one attnd directly, one behind nginx, three behind nginx
# (`make bench-scale`; a measurement, never a test).
#
# S layer: embed_dim 64, 4 heads; request N=1, L=32 with per-head attention weights (as in issue 3's
# FastAPI + torch comparison). Every configuration gets the same wrk run (DURATION s, CONNS
# connections, 2 wrk threads) against 127.0.0.1 only. The replicas use --threads 1 each for the 3-way
# run (3 processes x 1 thread on 2 cores) and the default for the single one; both are printed.
set -u
cd "$(dirname "$0")/.."
ATTND=${ATTND_BIN:-build/attnd}
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
for t in wrk nginx python3; do
    command -v "$t" >/dev/null || { echo "bench_scale.sh: needs $t (apt-get install $t)" >&2; exit 1; }
done
[ -x "$ATTND" ] || { echo "bench_scale.sh: build $ATTND first (make)" >&2; exit 1; }

T=$(mktemp -d /tmp/attnd-bench-scale.XXXXXX)
chmod 755 "$T"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

read -r P1 P2 P3 P4 PN < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')

python3 - "$T/post.lua" <<'EOF'
import json, random, sys
random.seed(0)
q = [[[round(random.uniform(-1, 1), 4) for _ in range(64)] for _ in range(32)]]
body = json.dumps({"query": q, "need_weights": True, "average_attn_weights": False})
with open(sys.argv[1], "w") as f:
    f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
    f.write("wrk.body = [==[%s]==]\n" % body)
EOF

wait_up() {
    for _ in $(seq 1 100); do
        curl -fsS -o /dev/null --max-time 1 "$1/healthz" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "no answer from $1" >&2
    return 1
}
create_s() {
    curl -fsS -o /dev/null -X PUT -H "Content-Type: application/json" "$1/v1/layers/s" \
        -d '{"config": {"embed_dim": 64, "num_heads": 4}, "init": {"method": "xavier_uniform", "seed": 0}}'
}
run_wrk() { # run_wrk LABEL URL
    local out
    out=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s "$T/post.lua" "$2/v1/layers/s/forward" 2>&1)
    printf '%-44s %10s req/s   p50 %8s   p99 %8s   errors: %s\n' "$1" \
        "$(awk '/Requests\/sec/{print $2}' <<<"$out")" \
        "$(awk '$1=="50%"{print $2}' <<<"$out")" "$(awk '$1=="99%"{print $2}' <<<"$out")" \
        "$(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr '\n' ' ' | sed 's/  */ /g')"
}
start_nginx() { # start_nginx PORT...: nginx with docker/nginx.conf in front of the given ports
    local conf=$T/nginx-$#
    mkdir -p "$conf"
    local ups="" p
    for p in "$@"; do ups="$ups        server 127.0.0.1:$p max_fails=3 fail_timeout=5s;\n"; done
    # Swap the three compose replicas for the given ports, keep every other line of the file.
    awk -v ups="$ups" '/^[ \t]*server attnd1:8080/{printf "%s", ups; next} /^[ \t]*server attnd[0-9]:8080/{next} {print}' \
        docker/nginx.conf |
        sed -e "s#listen 8080;#listen 127.0.0.1:$PN;#" -e "s#/var/run/nginx.pid#$conf/nginx.pid#" \
            -e "s#/var/log/nginx/access.log#off#" -e "s#/var/log/nginx#$conf#g" \
            -e "s#/var/cache/nginx#$conf#g" -e 's#^worker_processes auto;#worker_processes 1;#' >"$conf/nginx.conf"
    [ "$(id -u)" = 0 ] && chown -R nobody "$conf"
    nginx -p "$conf" -c "$conf/nginx.conf" -e "$conf/error.log" -g 'daemon off;' &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    wait_up "http://127.0.0.1:$PN"
}
stop_pid() {
    kill -TERM "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

echo "wrk -t2 -c$CONNS -d${DURATION}s, S layer (E=64, H=4, N=1, L=32, per-head weights), $(nproc) cores"
echo "note: nginx runs 1 worker here so that it competes for the 2 cores as little as possible"

# 1 replica, default threads, direct
"$ATTND" --host 127.0.0.1 --port "$P1" --log-format off &
A1=$!
PIDS+=("$A1")
wait_up "http://127.0.0.1:$P1" && create_s "http://127.0.0.1:$P1"
run_wrk "1 replica, direct" "http://127.0.0.1:$P1"
start_nginx "$P1"
run_wrk "1 replica, through nginx" "http://127.0.0.1:$PN"
stop_pid "$NGINX_PID"
stop_pid "$A1"

# 3 replicas sharing a data dir (--watch), each with 1 HTTP thread, through nginx
mkdir -p "$T/data"
for p in "$P2" "$P3" "$P4"; do
    "$ATTND" --host 127.0.0.1 --port "$p" --data-dir "$T/data" --watch --threads 1 --log-format off &
    PIDS+=($!)
    wait_up "http://127.0.0.1:$p"
done
create_s "http://127.0.0.1:$P2"
for p in "$P3" "$P4"; do
    for _ in $(seq 1 40); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/v1/layers/s")" = 200 ] && break
        sleep 0.05
    done
done
start_nginx "$P2" "$P3" "$P4"
run_wrk "3 replicas (1 HTTP thread each), through nginx" "http://127.0.0.1:$PN"
stop_pid "$NGINX_PID"
