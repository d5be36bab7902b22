#!/usr/bin/env python3
"""client.py - attnd from Python with requests and numpy, no torch needed.

Creates a layer from a state_dict named and shaped as torch's (here made with numpy, as
torch.nn.MultiheadAttention(8, 2).state_dict() would hold it: batch_first False, so tensors are
[L, N, E]), runs a forward pass with base64 tensors, reads each head's attention weights into a
numpy array, checks everything against a numpy reference of torch's computation, asks the trace for
two stages, and deletes the layer.

    python3 examples/client.py [URL]        # default $ATTND_URL, else http://localhost:8080

Exits 0 and prints "N passed, 0 failed" when every check holds.
"""
import base64
import os
import sys

import numpy as np
import requests

URL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ATTND_URL", "http://localhost:8080")
LAYER = URL + "/v1/layers/example-py"
checks = {"passed": 0, "failed": 0}


def check(ok, what):
    checks["passed" if ok else "failed"] += 1
    print(("ok   " if ok else "FAIL ") + what)


def b64(a):
    """A numpy array as attnd's base64 tensor: little-endian float32, with its shape."""
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "dtype": "float32", "base64": base64.b64encode(a.tobytes()).decode()}


def array(t):
    """An attnd base64 tensor as a numpy array."""
    return np.frombuffer(base64.b64decode(t["base64"]), dtype="<f4").reshape(t["shape"])


def call(method, url, **kw):
    r = requests.request(method, url, timeout=30, **kw)
    if not r.ok:  # every error is JSON: {"error": {"code", "message", "field"}, "request_id"}
        e = r.json()
        raise SystemExit("%s %s: %d %s (request %s)" % (method, url, r.status_code,
                                                         e["error"]["message"], e["request_id"]))
    return r.json() if r.content else None


def reference(x, sd, heads):
    """torch's MultiheadAttention forward (eval, self-attention) in float64 numpy, x [L, N, E]."""
    L, N, E = x.shape
    D = E // heads
    q, k, v = np.split(x @ sd["in_proj_weight"].T + sd["in_proj_bias"], 3, axis=-1)
    split = lambda t: t.reshape(L, N * heads, D).transpose(1, 0, 2)  # [N*H, L, D], as torch views it
    q, k, v = split(q) / np.sqrt(D), split(k), split(v)
    s = q @ k.transpose(0, 2, 1)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    o = (w @ v).transpose(1, 0, 2).reshape(L, N, E)
    return o @ sd["out_proj.weight"].T + sd["out_proj.bias"], w.reshape(N, heads, L, L)


E, H, L, N = 8, 2, 5, 2
rng = np.random.default_rng(0)
state_dict = {  # the names and shapes of torch.nn.MultiheadAttention(E, H).state_dict()
    "in_proj_weight": rng.uniform(-0.5, 0.5, (3 * E, E)),
    "in_proj_bias": rng.uniform(-0.1, 0.1, 3 * E),
    "out_proj.weight": rng.uniform(-0.5, 0.5, (E, E)),
    "out_proj.bias": rng.uniform(-0.1, 0.1, E),
}
info = call("PUT", LAYER, json={"config": {"embed_dim": E, "num_heads": H, "batch_first": False},
                                "weights": {k: b64(v) for k, v in state_dict.items()}})
check(info["parameter_count"] == sum(v.size for v in state_dict.values()),
      "PUT example-py: %d parameters under torch's names" % info["parameter_count"])

x = rng.standard_normal((L, N, E)).astype(np.float32)  # [L, N, E]: sequence-first, as torch's default
reply = call("POST", LAYER + "/forward", json={"query": b64(x), "need_weights": True,
                                               "average_attn_weights": False, "encoding": "base64"})
out, weights = array(reply["output"]), array(reply["attn_weights"])  # [L, N, E], [N, H, L, S]
check(out.shape == (L, N, E) and weights.shape == (N, H, L, L),
      "forward: output %s, per-head weights %s" % (out.shape, weights.shape))
want_out, want_w = reference(x.astype(np.float64), state_dict, H)
# float32 round-off: the project's tolerance, 2e-5 absolute + 1e-4 relative
check(np.allclose(out, want_out, atol=2e-5, rtol=1e-4),
      "the output is the reference's (largest difference %.2g)" % np.abs(out - want_out).max())
check(np.allclose(weights, want_w, atol=2e-5, rtol=1e-4),
      "each head's weights are the reference's (largest difference %.2g)" % np.abs(weights - want_w).max())
check(np.allclose(weights.sum(axis=-1), 1, atol=1e-5), "every row of weights sums to 1")
print("batch 0, head 1, query 0 attends to the keys with weights", np.round(weights[0, 1, 0], 4))

trace = call("POST", LAYER + "/trace", json={"query": b64(x), "stages": ["attn_weights", "scores"],
                                             "average_attn_weights": False, "encoding": "base64"})
names = [(s["name"], "".join(s["axes"])) for s in trace["stages"]]
check(names == [("scores", "NHLS"), ("attn_weights", "NHLS")],
      "trace: only the stages asked, in pipeline order, axes named: %s" % names)
check(np.array_equal(array(trace["stages"][1]["tensor"]), weights),
      "the trace's attn_weights are forward's, bit for bit")

call("DELETE", LAYER)
print("%d passed, %d failed" % (checks["passed"], checks["failed"]))
sys.exit(1 if checks["failed"] else 0)
