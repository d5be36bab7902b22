#!/usr/bin/env python3
"""make soak: mixed load on one daemon with a data dir for SOAK_MINUTES minutes (default 10).

A benchmark, not a test (never part of make test). One attnd (--data-dir in build/soak/, an API key)
serves, on keep-alive connections from a few client threads:
  forwards     small (the demo layer, nested JSON, L=8) and medium (a 256-wide layer, base64, L=128),
               traces, and /v2 binary inferences;
  changes      layers created, their weights replaced (JSON and safetensors), deleted - each thread its
               own names, so every answer is known in advance;
  scrapes      GET /metrics, /readyz, /v1/layers;
  slow clients headers and a body sent a few bytes at a time, within the deadlines (they must be
               answered), and a reply read slowly;
  bad requests malformed JSON, an unknown layer, a wrong key, a shape that does not fit - each must get
               its 4xx, counted apart.
Every minute it prints the requests and errors of that minute, p50 and p99 latency of the good
requests, and the daemon's RSS. An error is a reply other than the one expected (any 5xx included)
or a failed connection; there must be none. At the end: the RSS after the first minute must not
have grown by more than 5% (the verdict is printed). Exit status 1 when there were errors or the
RSS grew more.

    make soak                           10 minutes
    SOAK_MINUTES=2 make soak            or: scripts/soak.py --attnd build/attnd --minutes 2
Standard library only.
"""
import argparse
import base64
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

KEY = "soak-key-4f9a"
AUTH = {"Authorization": "Bearer " + KEY}
JSON = {"Content-Type": "application/json"}


class Stats:
    """Counters of the current minute and of the whole run (guarded by one lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.minute = self._empty()
        self.total = self._empty()

    @staticmethod
    def _empty():
        return {"requests": 0, "errors": 0, "bad_4xx": 0, "lat": [], "by_kind": {}, "samples": []}

    def add(self, kind, seconds, ok, bad_request=False, what=""):
        with self.lock:
            for s in (self.minute, self.total):
                s["requests"] += 1
                s["by_kind"][kind] = s["by_kind"].get(kind, 0) + 1
                if not ok:
                    s["errors"] += 1
                    if len(s["samples"]) < 5:
                        s["samples"].append(f"{kind}: {what}")
                elif bad_request:
                    s["bad_4xx"] += 1
                else:
                    s["lat"].append(seconds)

    def take_minute(self):
        with self.lock:
            m, self.minute = self.minute, self._empty()
        return m


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def b64_tensor(shape, values):
    return {"shape": shape, "dtype": "float32", "base64": base64.b64encode(f32(values)).decode()}


def safetensors(params):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, shape, values in sorted(params):
        raw = f32(values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def params_of(e, seed):
    rnd = random.Random(seed)
    def vals(n):
        return [rnd.uniform(-0.1, 0.1) for _ in range(n)]
    return [("in_proj_weight", [3 * e, e], vals(3 * e * e)), ("in_proj_bias", [3 * e], vals(3 * e)),
            ("out_proj.weight", [e, e], vals(e * e)), ("out_proj.bias", [e], vals(e))]


class Client:
    """One keep-alive connection; reconnects when the daemon closed it (after an error reply)."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # a keep-alive connection the daemon closed between requests (idle timeout)
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")


def run_op(stats, kind, fn, expect, bad=False):
    t0 = time.monotonic()
    try:
        status, data = fn()
    except Exception as e:  # a failed connection is an error
        stats.add(kind, time.monotonic() - t0, False, what=f"{type(e).__name__}: {e}")
        return None
    dt = time.monotonic() - t0
    ok = status in expect if isinstance(expect, (tuple, list, set)) else status == expect
    stats.add(kind, dt, ok, bad, what=f"{status} {data[:160]!r}")
    return data


def worker(idx, port, stats, stop, medium_e):
    rnd = random.Random(idx)
    c = Client(port)
    small_q = [[[rnd.uniform(-1, 1) for _ in range(64)] for _ in range(8)]]
    small = json.dumps({"query": small_q}).encode()
    trace = json.dumps({"query": [[rnd.uniform(-1, 1) for _ in range(64)] for _ in range(4)], "is_causal": True}).encode()
    med = json.dumps({"query": b64_tensor([1, 128, medium_e], [rnd.uniform(-1, 1) for _ in range(128 * medium_e)]),
                      "need_weights": True}).encode()
    v2_json = json.dumps({"inputs": [{"name": "query", "datatype": "FP32", "shape": [1, 16, 64],
                                      "parameters": {"binary_data_size": 16 * 64 * 4}}],
                          "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    v2_body = v2_json + f32([rnd.uniform(-1, 1) for _ in range(16 * 64)])
    v2_headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(v2_json))}
    name = f"churn-{idx}"
    cfg = json.dumps({"config": {"embed_dim": 32, "num_heads": 4}, "init": {"method": "xavier_uniform", "seed": idx}}).encode()
    weights_json = json.dumps({n: b64_tensor(s, v) for n, s, v in params_of(32, idx)}).encode()
    weights_st = safetensors(params_of(32, idx + 1000))
    exists = False
    ops = [
        (30, "forward_small", lambda: run_op(stats, "forward_small", lambda: c.request("POST", "/v1/layers/demo/forward", small, JSON), 200)),
        (8, "forward_medium", lambda: run_op(stats, "forward_medium", lambda: c.request("POST", "/v1/layers/medium/forward", med, JSON), 200)),
        (8, "trace", lambda: run_op(stats, "trace", lambda: c.request("POST", "/v1/layers/demo/trace", trace, JSON), 200)),
        (12, "v2_binary", lambda: run_op(stats, "v2_binary", lambda: c.request("POST", "/v2/models/demo/infer", v2_body, v2_headers), 200)),
        (6, "metrics", lambda: run_op(stats, "metrics", lambda: c.request("GET", "/metrics"), 200)),
        (3, "readyz", lambda: run_op(stats, "readyz", lambda: c.request("GET", "/readyz"), 200)),
        (3, "list", lambda: run_op(stats, "list", lambda: c.request("GET", "/v1/layers"), 200)),
        (5, "bad_json", lambda: run_op(stats, "bad_json", lambda: c.request("POST", "/v1/layers/demo/forward", b'{"query": [[1, 2', JSON), 400, bad=True)),
        (3, "bad_layer", lambda: run_op(stats, "bad_layer", lambda: c.request("POST", "/v1/layers/nope/forward", small, JSON), 404, bad=True)),
        (3, "bad_key", lambda: run_op(stats, "bad_key", lambda: c.request("DELETE", "/v1/layers/demo", None, {"Authorization": "Bearer wrong"}), 401, bad=True)),
        (3, "bad_shape", lambda: run_op(stats, "bad_shape", lambda: c.request("POST", "/v1/layers/medium/forward", small, JSON), 400, bad=True)),
    ]
    total = sum(w for w, _, _ in ops) + 10
    while not stop.is_set():
        r = rnd.uniform(0, total)
        for w, _, fn in ops:
            if r < w:
                fn()
                break
            r -= w
        else:  # a change to this thread's own layer
            step = rnd.randrange(4)
            if not exists or step == 0:
                run_op(stats, "layer_put", lambda: c.request("PUT", f"/v1/layers/{name}", cfg, {**JSON, **AUTH}), (200, 201))
                exists = True
            elif step == 1:
                run_op(stats, "weights_put_json", lambda: c.request("PUT", f"/v1/layers/{name}/weights", weights_json, {**JSON, **AUTH}), 200)
            elif step == 2:
                run_op(stats, "weights_put_st", lambda: c.request("PUT", f"/v1/layers/{name}/weights", weights_st,
                                                                  {"Content-Type": "application/octet-stream", **AUTH}), 200)
            else:
                run_op(stats, "layer_delete", lambda: c.request("DELETE", f"/v1/layers/{name}", None, AUTH), 204)
                exists = False


def slow_client(port, stats, stop):
    """A forward whose headers and body trickle in over ~3 s, then a large reply read slowly."""
    body = json.dumps({"query": [[0.5] * 64 for _ in range(2)]}).encode()
    req = (b"POST /v1/layers/demo/forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body
    get = b"GET /v1/layers/demo/weights?encoding=base64 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    while not stop.is_set():
        for kind, data, chunk, pause, read_pause in (("slow_send", req, 64, 0.1, 0), ("slow_read", get, len(get), 0, 0.02)):
            t0 = time.monotonic()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                for i in range(0, len(data), chunk):
                    s.sendall(data[i:i + chunk])
                    if pause:
                        time.sleep(pause)
                reply = b""
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                while True:
                    d = s.recv(4096)
                    if not d:
                        break
                    reply += d
                    if read_pause:
                        time.sleep(read_pause)
                s.close()
                status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0
                stats.add(kind, time.monotonic() - t0, status == 200, what=f"{status} {reply[:120]!r}")
            except Exception as e:
                stats.add(kind, time.monotonic() - t0, False, what=f"{type(e).__name__}: {e}")
            if stop.wait(0.5):
                return


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnd", default="build/attnd")
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "10")))
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--dir", default="build/soak")
    args = ap.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(os.path.join(args.dir, "data"))
    log_path = os.path.join(args.dir, "attnd.log")
    env = dict(os.environ, ATTND_API_KEY=KEY)
    log = open(log_path, "wb")
    d = subprocess.Popen([args.attnd, "--port", "0", "--demo", "--data-dir", os.path.join(args.dir, "data"),
                          "--log-format", "text"], stdout=log, stderr=subprocess.STDOUT, env=env)
    port = None
    for _ in range(200):
        m = re.search(rb"listening on http://[^ ]*:(\d+)", open(log_path, "rb").read())
        if m:
            port = int(m.group(1))
            break
        if d.poll() is not None:
            sys.exit(f"soak: attnd exited ({d.returncode}); see {log_path}")
        time.sleep(0.05)
    if not port:
        d.kill()
        sys.exit(f"soak: attnd did not say where it listens; see {log_path}")

    stats = Stats()
    stop = threading.Event()
    medium_e = 256
    c = Client(port)
    st, body = c.request("PUT", "/v1/layers/medium", json.dumps({"config": {"embed_dim": medium_e, "num_heads": 8},
                                                               "init": {"method": "xavier_uniform", "seed": 7}}).encode(),
                         {**JSON, **AUTH})
    if st not in (200, 201):
        d.kill()
        sys.exit(f"soak: cannot create the medium layer: {st} {body[:200]!r}")
    load = os.getloadavg()[0]
    print(f"soak: attnd pid {d.pid} on port {port}, data dir {args.dir}/data, {args.clients} clients + a slow "
          f"one, {args.minutes:g} minutes; load average at start {load:.2f} on {os.cpu_count()} cores", flush=True)
    threads = [threading.Thread(target=worker, args=(i, port, stats, stop, medium_e), daemon=True)
               for i in range(args.clients)]
    threads.append(threading.Thread(target=slow_client, args=(port, stats, stop), daemon=True))
    for t in threads:
        t.start()

    print(f"{'min':>4} {'requests':>9} {'req/s':>7} {'errors':>6} {'bad 4xx':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'RSS MiB':>8} {'load':>5}", flush=True)
    rss = []
    t_start = time.monotonic()
    minutes = max(1, int(round(args.minutes)))
    period = args.minutes * 60 / minutes
    status = 0
    for m in range(1, minutes + 1):
        end = t_start + m * period
        while time.monotonic() < end:
            if d.poll() is not None:
                print(f"soak: attnd died (exit {d.returncode}); see {log_path}")
                stop.set()
                sys.exit(1)
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        s = stats.take_minute()
        r = rss_kib(d.pid)
        rss.append(r)
        print(f"{m:>4} {s['requests']:>9} {s['requests'] / period:>7.0f} {s['errors']:>6} {s['bad_4xx']:>7} "
              f"{pct(s['lat'], 50) * 1e3:>8.2f} {pct(s['lat'], 99) * 1e3:>8.2f} {r / 1024:>8.1f} "
              f"{os.getloadavg()[0]:>5.2f}", flush=True)
        for e in s["samples"]:
            print(f"       error: {e}", flush=True)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    tot = stats.total
    print(f"\ntotal: {tot['requests']} requests ({tot['requests'] / (time.monotonic() - t_start):.0f}/s), "
          f"{tot['errors']} errors, {tot['bad_4xx']} bad requests answered with their 4xx; "
          f"p50 {pct(tot['lat'], 50) * 1e3:.2f} ms, p99 {pct(tot['lat'], 99) * 1e3:.2f} ms")
    print("by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(tot["by_kind"].items())))
    if tot["errors"]:
        status = 1
    if len(rss) >= 2:
        growth = (rss[-1] - rss[0]) / rss[0] * 100
        verdict = "PASS" if growth <= 5 else "FAIL"
        print(f"RSS after minute 1: {rss[0] / 1024:.1f} MiB, at the end: {rss[-1] / 1024:.1f} MiB, peak "
              f"{max(rss) / 1024:.1f} MiB: {growth:+.1f}% (limit +5%): {verdict}")
        if verdict == "FAIL":
            status = 1
    else:
        print("RSS: one minute only, no growth to judge")
    print(f"errors: {'none' if not tot['errors'] else tot['errors']}: {'PASS' if not tot['errors'] else 'FAIL'}")
    d.send_signal(signal.SIGTERM)
    try:
        d.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.kill()
    sys.exit(status)


if __name__ == "__main__":
    main()
