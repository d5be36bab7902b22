#!/usr/bin/env python3
"""golden_client.py - drive a running attnd with a committed torch golden case (tests/golden/*.json).

Used by scripts/test_container.sh and scripts/test_scale.sh, which have a daemon (in a container, or
behind nginx) but no libcurl test harness around it. Python's standard library only: no torch, no
requests, no numpy; the expected numbers come from the golden file, which torch wrote.

  golden_client.py put     URL NAME CASE [--variant K]  create/replace layer NAME from CASE's config and
                                                        weights (K != 0 scales every weight by 1 + K/8,
                                                        giving a different layer of the same shape)
  golden_client.py check   URL NAME CASE                forward CASE's inputs through NAME and compare
                                                        with CASE's expected output (and attention weights)
                                                        within 2e-5 absolute + 1e-4 relative
  golden_client.py digest  URL NAME CASE                forward, print a SHA-256 of the output's float32
                                                        bytes (replicas serving one layer print the same)
  golden_client.py status  URL NAME                     print the HTTP status of GET /v1/layers/NAME
  golden_client.py follow  URLS NAME CASE STATE SECONDS [OLD]
                                                        poll every replica in URLS (comma-separated) until
                                                        NAME is in STATE (digest:HEX or absent); fail past
                                                        SECONDS, or when a replica shows anything but OLD
                                                        or STATE on the way (a half-written layer)
  golden_client.py burst   URL NAME CASE N DIGEST [PID AFTER]
                                                        N forwards from 4 threads; every answer must be 200
                                                        with DIGEST; sends SIGKILL to PID after AFTER answers

URL is the daemon's base URL (http://127.0.0.1:8080). Exit status 0 on success, 1 otherwise; one line
on stdout says what happened.
"""
import base64
import hashlib
import json
import math
import os
import signal
import struct
import sys
import threading
import time
import urllib.error
import urllib.request

ATOL = 2e-5
RTOL = 1e-4


def request(method, url, body=None, timeout=30):
    """Returns (status, parsed JSON or None, raw bytes)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return status, parsed, raw


def flatten(x):
    if isinstance(x, list):
        out = []
        for v in x:
            out.extend(flatten(v))
        return out
    return [x]


def shape_of(x):
    shape = []
    while isinstance(x, list):
        shape.append(len(x))
        x = x[0] if x else None
    return shape


def tensor_values(t):
    """(shape, list of floats) of a tensor in any of attnd's three JSON forms."""
    if isinstance(t, list):
        return shape_of(t), [float(v) for v in flatten(t)]
    shape = list(t["shape"])
    if "base64" in t:
        raw = base64.b64decode(t["base64"])
        return shape, list(struct.unpack("<%df" % (len(raw) // 4), raw))
    return shape, [float(v) for v in t["data"]]


def scaled(t, factor):
    shape, vals = tensor_values(t)
    raw = struct.pack("<%df" % len(vals), *[v * factor for v in vals])
    return {"shape": shape, "dtype": "float32", "base64": base64.b64encode(raw).decode()}


def load_case(path):
    with open(path) as f:
        return json.load(f)


def cmd_put(url, name, case, variant):
    weights = case["weights"]
    if variant:
        weights = {k: scaled(v, 1.0 + variant / 8.0) for k, v in weights.items()}
    status, body, raw = request("PUT", "%s/v1/layers/%s" % (url, name),
                                {"config": case["config"], "weights": weights})
    ok = status in (200, 201)
    print("PUT /v1/layers/%s -> %d%s" % (name, status, "" if ok else " " + raw[:300].decode("utf-8", "replace")))
    return 0 if ok else 1


def forward(url, name, case):
    body = dict(case["inputs"])
    body["encoding"] = "base64"
    return request("POST", "%s/v1/layers/%s/forward" % (url, name), body)


def compare(what, got, want):
    gshape, gvals = tensor_values(got)
    wshape, wvals = tensor_values(want)
    if gshape != wshape:
        return False, "%s: shape %s, torch gives %s" % (what, gshape, wshape)
    worst = 0.0
    for i, (g, w) in enumerate(zip(gvals, wvals)):
        if math.isnan(g) or abs(g - w) > ATOL + RTOL * abs(w):
            return False, "%s[%d] = %r, torch gives %r" % (what, i, g, w)
        worst = max(worst, abs(g - w))
    return True, "%s %s max |diff| %.3g" % (what, gshape, worst)


def cmd_check(url, name, case):
    status, body, raw = forward(url, name, case)
    if status != 200 or not isinstance(body, dict):
        print("forward %s -> %d %s" % (name, status, raw[:300].decode("utf-8", "replace")))
        return 1
    notes = []
    for key in ("output", "attn_weights"):
        want = case["expected"].get(key)
        if want is None:
            continue
        if key not in body:
            print("forward %s: answer has no %s" % (name, key))
            return 1
        ok, note = compare(key, body[key], want)
        notes.append(note)
        if not ok:
            print("forward %s: %s" % (name, note))
            return 1
    print("forward %s matches torch (%s): %s" % (name, case.get("name", "?"), "; ".join(notes)))
    return 0


def cmd_digest(url, name, case):
    status, body, raw = forward(url, name, case)
    if status != 200 or not isinstance(body, dict) or "output" not in body:
        print("forward %s -> %d" % (name, status))
        return 1
    shape, vals = tensor_values(body["output"])
    print(hashlib.sha256(struct.pack("<%df" % len(vals), *vals)).hexdigest())
    return 0


def state_of(url, name, case):
    """What one replica serves under NAME: "absent", "digest:HEX", or "other:..." for anything else."""
    try:
        status, body, raw = forward(url, name, case)
    except OSError as e:
        return "other:%s" % e
    if status == 404:
        return "absent"
    if status != 200 or not isinstance(body, dict) or "output" not in body:
        return "other:%d %s" % (status, raw[:200].decode("utf-8", "replace"))
    _, vals = tensor_values(body["output"])
    return "digest:" + hashlib.sha256(struct.pack("<%df" % len(vals), *vals)).hexdigest()


def cmd_follow(urls, name, case, want, seconds, old):
    t0 = time.monotonic()
    pending = list(urls)
    rc = 0
    while pending:
        for url in list(pending):
            st = state_of(url, name, case)
            took = time.monotonic() - t0
            if st == want:
                print("%s serves %s after %.0f ms" % (url, want[:19], took * 1000))
                pending.remove(url)
            elif st != old:
                print("%s served %s while going from %s to %s" % (url, st[:200], old[:19], want[:19]))
                rc = 1
                pending.remove(url)
        if pending and time.monotonic() - t0 > seconds:
            print("%s still not at %s after %.1f s" % (",".join(pending), want[:19], seconds))
            return 1
        if pending:
            time.sleep(0.02)
    return rc


def cmd_burst(url, name, case, n, want, kill_pid, kill_after):
    lock = threading.Lock()
    counts = {"done": 0, "ok": 0, "bad": 0}
    errors = []
    killed = [False]

    def worker(k):
        for _ in range(k):
            st = state_of(url, name, case)
            with lock:
                counts["done"] += 1
                if st == want:
                    counts["ok"] += 1
                else:
                    counts["bad"] += 1
                    errors.append(st[:200])
                if kill_pid and not killed[0] and counts["done"] >= kill_after:
                    os.kill(kill_pid, signal.SIGKILL)
                    killed[0] = True
                    print("SIGKILL to pid %d after %d answers" % (kill_pid, counts["done"]))

    threads = [threading.Thread(target=worker, args=(n // 4 + (1 if i < n % 4 else 0),)) for i in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    print("burst: %d requests in %.2f s, %d ok, %d failed%s" % (
        counts["done"], took, counts["ok"], counts["bad"],
        (" (first: %s)" % errors[0]) if errors else ""))
    return 0 if counts["bad"] == 0 and counts["done"] == n and (killed[0] or not kill_pid) else 1


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    cmd, url, name = argv[1], argv[2].rstrip("/"), argv[3]
    if cmd == "status":
        status, _, _ = request("GET", "%s/v1/layers/%s" % (url, name))
        print(status)
        return 0
    if len(argv) < 5:
        sys.stderr.write(__doc__)
        return 2
    case = load_case(argv[4])
    if cmd == "put":
        variant = int(argv[6]) if len(argv) > 6 and argv[5] == "--variant" else 0
        return cmd_put(url, name, case, variant)
    if cmd == "check":
        return cmd_check(url, name, case)
    if cmd == "digest":
        return cmd_digest(url, name, case)
    if cmd == "follow" and len(argv) >= 7:
        urls = [u.rstrip("/") for u in argv[2].split(",")]
        return cmd_follow(urls, name, case, argv[5], float(argv[6]), argv[7] if len(argv) > 7 else "absent")
    if cmd == "burst" and len(argv) >= 7:
        pid = int(argv[7]) if len(argv) > 8 else 0
        after = int(argv[8]) if len(argv) > 8 else 0
        return cmd_burst(url, name, case, int(argv[5]), argv[6], pid, after)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError, KeyError) as e:
        print("error: %s" % e)
        sys.exit(1)
