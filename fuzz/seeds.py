#!/usr/bin/env python3
"""Seeds for the fuzz harnesses, grown from real requests and files: the golden cases
(tests/golden), the bad-request cases (tests/cases), the curl examples of the README and docs/, the
safetensors files (tests/data, tests/golden_datadir), and large requests that reach what only large
bodies reach (the worker hand-off, the streaming base64 decoder).

    fuzz/seeds.py build-fuzz/seeds            writes build-fuzz/seeds/<harness>/<name>
    fuzz/reseed.sh                            this, then fuzz/merge.sh for every harness

Standard library only. Each harness's input format is described at the top of fuzz/fuzz_<name>.c;
the writers below follow those descriptions.
"""
import base64
import glob
import json
import os
import re
import shlex
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "fuzz-key-0123456789"  # fuzz_http.c's API key
OUT = {}  # harness -> {name: bytes}


def seed(harness, name, data):
    if isinstance(data, str):
        data = data.encode()
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100]
    OUT.setdefault(harness, {})[name] = data


# ---------------------------------------------------------------------------------------------
# fuzz_http's escapes (fuzz/fuzz_http.c)

LEN = b"\xff\xfd"  # this request's body length
END = b"\xff\xfc"  # end of a body: sent, and the daemon runs, before what follows
SPLIT = b"\xff\xfb"  # the same inside a body


def lit(b):
    """Binary bytes as the harness reads them (FF doubled)."""
    return b.replace(b"\xff", b"\xff\xff")


def rep(unit, times):
    """unit repeated times (1..65536) times."""
    assert 1 <= times <= 65536 and len(unit) < 65536
    return b"\xff\xfe" + struct.pack("<HH", times - 1, len(unit)) + lit(unit)


def req(method, path, body=None, headers=(), auth=False, ct="application/json", raw_body=False):
    """One HTTP/1.1 request; body is str/bytes (bytes made with lit()/rep() when raw_body)."""
    h = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if auth:
        h.append(f"Authorization: Bearer {KEY}")
    h += list(headers)
    if body is not None:
        if ct:
            h.append(f"Content-Type: {ct}")
    head = "\r\n".join(h).encode()
    if body is None:
        return head + b"\r\n\r\n" + END
    if isinstance(body, str):
        body = body.encode()
    if not raw_body:
        body = lit(body)
    return head + b"\r\nContent-Length: " + LEN + b"\r\n\r\n" + body + END


def f32_b64(values):
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def tensor(shape, values):
    return {"shape": shape, "dtype": "float32", "base64": f32_b64(values)}


def b64_values(t):
    raw = base64.b64decode(t["base64"])
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def pack(dtype, values):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F64":
        return struct.pack(f"<{len(values)}d", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    if dtype == "BF16":  # the top half of the float32 (values here are exact in bfloat16)
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    raise ValueError(dtype)


def safetensors(tensors, metadata=None, dtype="F32"):
    """A safetensors file of tensors [(name, shape, values)], all of one dtype."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, shape, values in sorted(tensors):
        raw = pack(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def layer_params(cfg, value=0.01):
    """Every parameter of a layer config, filled with value: [(name, shape, values)]."""
    e, h = cfg["embed_dim"], cfg["num_heads"]
    k, v = cfg.get("kdim", e), cfg.get("vdim", e)
    bias = cfg.get("bias", True)
    ps = []
    if k == e and v == e:
        ps.append(("in_proj_weight", [3 * e, e]))
    else:
        ps += [("q_proj_weight", [e, e]), ("k_proj_weight", [e, k]), ("v_proj_weight", [e, v])]
    if bias:
        ps += [("in_proj_bias", [3 * e]), ("out_proj.bias", [e])]
    ps.append(("out_proj.weight", [e, e]))
    if cfg.get("add_bias_kv"):
        ps += [("bias_k", [1, 1, e]), ("bias_v", [1, 1, e])]
    out = []
    for name, shape in ps:
        n = 1
        for d in shape:
            n *= d
        out.append((name, shape, [value * ((i % 7) - 3) for i in range(n)]))
    return out


CFG64 = {"embed_dim": 64, "num_heads": 4}  # the demo layer's


def demo_safetensors(metadata):
    """A safetensors file of the demo layer's shapes (66 KB) in fuzz_http's escapes (repeats)."""
    params = layer_params(CFG64)
    hdr = {"__metadata__": metadata}
    off = 0
    for name, shape, values in sorted(params):
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * len(values)]}
        off += 4 * len(values)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    body = lit(struct.pack("<Q", len(h)) + h)
    for name, shape, values in sorted(params):
        body += rep(struct.pack("<f", 0.015625), len(values))
    return body


# ---------------------------------------------------------------------------------------------
# sources

def golden():
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/golden/*.json"))):
        g = json.load(open(path))
        yield os.path.basename(path)[:-5], g


def cases():
    for d in sorted(glob.glob(os.path.join(ROOT, "tests/cases/*/"))):
        try:
            body = open(os.path.join(d, "request.json"), "rb").read()
            exp = json.load(open(os.path.join(d, "expected.json")))
        except OSError:
            continue
        yield os.path.basename(d.rstrip("/")), body, exp


def doc_curls():
    """(method, path, headers, body) of every curl command in the README and docs/."""
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs/*.md")))
    for f in files:
        text = open(f).read()
        for block in re.findall(r"```sh\n(.*?)```", text, re.S):
            joined = re.sub(r"\\\n", " ", block)
            commands, cur = [], ""
            for line in joined.splitlines():  # a quoted body may go on over several lines
                cur = cur + "\n" + line if cur else line
                try:
                    shlex.split(cur, comments=True)
                except ValueError:
                    continue
                commands.append(cur.strip())
                cur = ""
            for line in commands:
                if not line.startswith("curl "):
                    continue
                line = line.replace('"$J"', "'Content-Type: application/json'")
                args = shlex.split(line, comments=True)[1:]
                method, headers, body, url = None, [], None, None
                i = 0
                while i < len(args):
                    a = args[i]
                    if a == "-X":
                        method = args[i + 1]
                        i += 1
                    elif a == "-H":
                        headers.append(args[i + 1])
                        i += 1
                    elif a in ("-d", "--data", "--data-binary"):
                        body = args[i + 1]
                        i += 1
                    elif a == "-o":
                        i += 1
                    elif not a.startswith("-"):
                        url = a
                    i += 1
                if not url or "localhost" not in url:
                    continue
                path = "/" + url.split("/", 1)[1] if "/" in url else "/"
                yield method or ("POST" if body is not None else "GET"), path, headers, body


def datadir_files():
    for d in sorted(glob.glob(os.path.join(ROOT, "tests/golden_datadir/layers/*/"))):
        yield (os.path.basename(d.rstrip("/")), open(os.path.join(d, "config.json"), "rb").read(),
               open(os.path.join(d, "weights.safetensors"), "rb").read())


def st_files():
    for p in sorted(glob.glob(os.path.join(ROOT, "tests/data/safetensors/*.safetensors"))):
        yield os.path.basename(p), open(p, "rb").read()
    for name, _, w in datadir_files():
        yield name + ".safetensors", w


# ---------------------------------------------------------------------------------------------
# fuzz_http

def http_seeds():
    H = "http"
    cfg8 = {"embed_dim": 8, "num_heads": 2}
    # golden cases: the layer with torch's weights, then a forward, a trace and a /v2 infer on it
    for name, g in golden():
        put = req("PUT", "/v1/layers/g", json.dumps({"config": g["config"], "weights": g["weights"]}), auth=True)
        fwd = req("POST", "/v1/layers/g/forward", json.dumps(g["inputs"]))
        if len(put) + len(fwd) > 32768:  # the engine's large paths are fuzz_mha_plan's
            continue
        seed(H, "golden_" + name, put + fwd)
        if "trace" in g and int(name[:3]) % 4 == 0:
            seed(H, "golden_trace_" + name, put + req("POST", "/v1/layers/g/trace", json.dumps(g["inputs"])))
        inputs = []
        for k in ("query", "key", "value"):
            t = g["inputs"].get(k)
            if isinstance(t, dict) and "base64" in t and t.get("dtype", "float32") == "float32":
                inputs.append({"name": k, "datatype": "FP32", "shape": t["shape"], "data": b64_values(t)})
        if inputs and int(name[:3]) % 4 == 1:
            seed(H, "golden_v2_" + name, put + req("POST", "/v2/models/g/infer", json.dumps({"id": name, "inputs": inputs})))
    # the bad-request cases, against their layer "case"
    case_put = req("PUT", "/v1/layers/case", json.dumps({"config": {"embed_dim": 4, "num_heads": 2},
                                                         "init": {"method": "xavier_uniform", "seed": 1}}), auth=True)
    for name, body, exp in cases():
        method = exp.get("method", "POST")
        path = exp.get("path", "/v1/layers/case/forward")
        ct = exp.get("content_type", "application/json")
        if method in ("GET", "DELETE", "HEAD") and not body:
            r = req(method, path, auth=method == "DELETE")
        else:
            r = req(method, path, body, ct=ct, auth=method in ("PUT", "DELETE"))
        seed(H, "case_" + name, case_put + r)
    # the README's and docs' curl examples, in order on one connection (they build on each other)
    walk = b""
    for i, (method, path, headers, body) in enumerate(doc_curls()):
        raw = False
        if body and body.startswith("@"):  # a file: demo's weights
            body, raw = demo_safetensors({"format": "pt"}), True
        ct = None
        hs = []
        for h in headers:
            if h.lower().startswith("content-type:"):
                ct = h.split(":", 1)[1].strip()
            elif h.lower().startswith("authorization:"):
                hs.append(f"Authorization: Bearer {KEY}")
            else:
                hs.append(h)
        r = req(method, path, body, headers=hs, ct=ct, raw_body=raw, auth=method in ("PUT", "DELETE") and not any(
            x.startswith("Authorization") for x in hs))
        seed(H, f"doc_{i:02d}_{method}_{path}", r)
        walk += r
    seed(H, "doc_walk", walk)
    # a weights PUT as safetensors: a layer from one file, then its weights replaced from another
    for fname, data in st_files():
        seed(H, "st_weights_" + fname, req("PUT", "/v1/layers/st", json.dumps({"config": cfg8}), auth=True)
             + req("PUT", "/v1/layers/st/weights", data, ct="application/octet-stream", auth=True)
             + req("GET", "/v1/layers/st/weights", headers=["Accept: application/octet-stream"]))
    for name, c, w in datadir_files():
        cfg = json.loads(c)
        f = safetensors([(n, s, v) for n, s, v in layer_params(cfg)], {"config": json.dumps(cfg)})
        seed(H, "st_layer_" + name, req("PUT", "/v1/layers/st", f, ct="application/octet-stream", auth=True)
             + req("POST", "/v1/layers/st/forward", json.dumps({"query": [[1.0] * cfg["embed_dim"]]})))
    seed(H, "st_layer_meta_empty", req("PUT", "/v1/layers/st", safetensors(layer_params(cfg8), {}),
                                       ct="application/octet-stream", auth=True))
    # a successful DELETE (after a PUT), conditional and not, and the key checked every way
    put_x = req("PUT", "/v1/layers/x", json.dumps({"config": {"embed_dim": 4, "num_heads": 1}}), auth=True)
    seed(H, "delete_ok", put_x + req("DELETE", "/v1/layers/x", auth=True) + req("GET", "/v1/layers/x"))
    seed(H, "delete_if_match", put_x + req("DELETE", "/v1/layers/x", headers=['If-Match: W/"1", "2", "3"'], auth=True))
    seed(H, "delete_if_match_star", put_x + req("DELETE", "/v1/layers/x", headers=["If-Match: *"], auth=True))
    seed(H, "put_if_none_match", put_x + req("PUT", "/v1/layers/x", json.dumps({"config": cfg8}),
                                               headers=["If-None-Match: *"], auth=True))
    for i, a in enumerate([f"Bearer {KEY}", f"bearer   {KEY}  ", f"BEARER {KEY}\t", "Bearer wrong", "Bearer",
                           "Basic Zm9vOmJhcg==", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", ""]):
        seed(H, f"auth_{i}", req("DELETE", "/v1/layers/x", headers=[f"Authorization: {a}"]))
    for i, a in enumerate(["application/octet-stream", "application/json;q=0.5, application/octet-stream",
                           "application/octet-stream;q=0, application/json", "*/*", "application/*;q=0.9",
                           "application/json, application/octet-stream;q=1.0", "application/octet-stream; q=0.001"]):
        seed(H, f"accept_{i}", req("GET", "/v1/layers/demo/weights", headers=[f"Accept: {a}"]))
    # large bodies (16 KiB and more in the fuzz build, see fuzz_http.c): a forward of 44 KB of
    # base64 (decoded while it arrives, on a worker), also split at odd points; a layer PUT of 66 KB
    # of safetensors (on a worker); a /v2 binary infer of 33 KB
    q = tensor([1, 1, 64], [0.5] * 64)
    unit = base64.b64encode(struct.pack("<3f", 1.0, -0.5, 0.25))  # 12 bytes -> 16 characters
    kv = b'{"shape": [1, 120, 64], "dtype": "float32", "base64": "' + rep(unit, 2560) + b'"}'
    body = b'{"query": ' + json.dumps(q).encode() + b', "key": ' + kv + b', "value": ' + kv + b"}"
    seed(H, "large_forward_base64", req("POST", "/v1/layers/demo/forward", body, raw_body=True))
    split = b'{"query": ' + json.dumps(q).encode() + b', "key": {"shape": [1, 120, 64], "dtype": "float32", "base64": "' \
        + rep(unit, 1000) + SPLIT + b"AAAA" + SPLIT + rep(unit, 1559) + b"AAAAAAAA" + SPLIT + b'AAAA"}, "value": ' + kv + b"}"
    seed(H, "large_forward_base64_split", req("POST", "/v1/layers/demo/forward", split, raw_body=True))
    seed(H, "large_trace_base64", req("POST", "/v1/layers/demo/trace", body, raw_body=True))
    st_body = demo_safetensors({"config": json.dumps(CFG64), "format": "pt"})
    seed(H, "large_put_safetensors", req("PUT", "/v1/layers/big", st_body, ct="application/octet-stream",
                                         auth=True, raw_body=True)
         + req("POST", "/v1/layers/big/forward", json.dumps({"query": [[0.5] * 64]}))
         + req("DELETE", "/v1/layers/big", auth=True))
    seed(H, "large_put_weights_safetensors", req("PUT", "/v1/layers/demo/weights", demo_safetensors({"format": "pt"}),
                                                 ct="application/octet-stream", auth=True, raw_body=True)
         + req("GET", "/v1/layers/demo/weights", headers=["Accept: application/octet-stream"]))
    v2 = json.dumps({"inputs": [
        {"name": "query", "datatype": "FP32", "shape": [1, 1, 64], "parameters": {"binary_data_size": 256}},
        {"name": "key", "datatype": "FP32", "shape": [1, 64, 64], "parameters": {"binary_data_size": 16384}},
        {"name": "value", "datatype": "FP32", "shape": [1, 64, 64], "parameters": {"binary_data_size": 16384}}],
        "parameters": {"binary_data_output": True}}).encode()
    v2body = v2 + rep(struct.pack("<f", 0.5), 64) + rep(struct.pack("<f", 0.25), 4096) * 2
    seed(H, "large_v2_binary", req("POST", "/v2/models/demo/infer", v2body, raw_body=True,
                                   ct="application/octet-stream",
                                   headers=[f"Inference-Header-Content-Length: {len(v2)}"]))
    # /metrics between requests, HEAD, chunked, a slow-ish pipelined mix
    seed(H, "mix", req("GET", "/metrics") + req("HEAD", "/v1/layers/demo") + req("GET", "/readyz")
         + req("GET", "/v1/layers/demo?L=3&S=4&N=2") + req("GET", "/openapi.yaml") + req("GET", "/v2")
         + req("GET", "/v2/models/demo/ready") + req("GET", "/v2/health/live"))


# ---------------------------------------------------------------------------------------------
# fuzz_predecode: a chunk-size byte, then a body (fuzz_expand.h's escapes; FF FB cuts it)

def predecode_seeds():
    H = "predecode"
    for name, g in golden():
        if int(name[:3]) % 3 == 0:
            seed(H, "golden_" + name, bytes([int(name[:3]) % 256]) + lit(json.dumps(g["inputs"]).encode()))
    for name, body, exp in cases():
        if b"base64" in body:
            seed(H, "case_" + name, b"\x07" + lit(body))
    unit = base64.b64encode(struct.pack("<3f", 1.0, -0.5, 0.25))
    inf = base64.b64encode(struct.pack("<3f", 1.0, float("inf"), 0.25))
    for i, (code, text) in enumerate([
            # 1.5 MiB of base64 in one key, cut at 64 KiB, and at the marks too
            (16, b'{"key": {"shape": [1, 98304, 1], "dtype": "float32", "base64": "' + rep(unit, 32768)
             + b'"}, "query": {"base64" :\t"' + rep(unit, 100) + SPLIT + b'AAAA"}}'),
            # a key cut inside `"base64"`, inside the white space and right after the opening quote
            (200, b'{"query": {"shape": [3], "dtype": "float32", "bas' + SPLIT + b'e64"  ' + SPLIT + b': "'
             + SPLIT + rep(unit, 65536) + b'"}, "value": {"base64": "' + rep(inf, 3) + b'"}}'),
            # five strings and a sixth, padding, an escape, text after padding, a bad character
            (3, b'{"a": {"base64": "AAA="}, "b": {"base64": "AA=="}, "c": {"base64": "QUJD\\/"}, '
             b'"d": {"base64": "AA==AAAA"}, "e": {"base64": "AA*A"}, "f": {"base64": "' + rep(unit, 1000)
             + b'"}, "g": {"base64": "AAAA"}}'),
            # not a key: "base64" inside a string, and followed by no string
            (1, b'{"s": "\\"base64\\": \\"AAAA", "base64": 5, "t": {"base64": "' + rep(unit, 65000) + b'"}}')]):
        seed(H, f"large_{i}", bytes([code]) + text)


# ---------------------------------------------------------------------------------------------
# fuzz_weights_put: a byte (bit 7: weights of existing layer bits 0-1; else a new layer), a file

WP_LAYERS = [{"embed_dim": 8, "num_heads": 2},  # fuzz_weights_put.c's four existing layers
             {"embed_dim": 6, "num_heads": 3, "kdim": 4, "vdim": 5, "add_bias_kv": True},
             {"embed_dim": 4, "num_heads": 2, "bias": False, "add_zero_attn": True},
             {"embed_dim": 3, "num_heads": 1}]


def weights_put_seeds():
    H = "weights_put"
    for i, cfg in enumerate(WP_LAYERS):
        for dt in ("F32", "F16", "BF16", "F64"):
            params = layer_params(cfg, 0.25)
            seed(H, f"weights_{i}_{dt}", bytes([0x80 | i]) + safetensors(params, {"format": "pt"}, dt))
            seed(H, f"layer_{i}_{dt}", bytes([i]) + safetensors(params, {"config": json.dumps(cfg)}, dt))
        # one parameter short, one too many, one of the wrong shape
        params = layer_params(cfg, 0.5)
        seed(H, f"weights_{i}_missing", bytes([0x80 | i]) + safetensors(params[1:]))
        seed(H, f"weights_{i}_extra", bytes([0x80 | i]) + safetensors(params + [("bias_k", [1, 1, 2], [0.0, 1.0])]))
        n, shape, v = params[0]
        seed(H, f"weights_{i}_shape", bytes([0x80 | i]) + safetensors([(n, [len(v)], v)] + params[1:]))
    seed(H, "layer_meta_empty", b"\x00" + safetensors(layer_params(WP_LAYERS[0]), {}))
    seed(H, "layer_config_not_object", b"\x00" + safetensors(layer_params(WP_LAYERS[0]), {"config": "[8, 2]"}))
    for fname, data in st_files():
        seed(H, "weights_" + fname, b"\x80" + data)
        seed(H, "layer_" + fname, b"\x00" + data)


# ---------------------------------------------------------------------------------------------
# fuzz_headers: a header value, NUL, a key

def headers_seeds():
    H = "headers"
    for i, v in enumerate([
            "application/json", "application/octet-stream;q=0.9, application/json;q=0.8",
            'text/html;level=1;q=0, text/html;charset="utf-8,x";q=0.001, */*;q=0.1',
            ",, application/json ;q=1.000 , application/octet-stream; q=0.5 ;x=y,",
            "application/octet-stream;q=1.0001, application/json;q=.5, text/html;q=",
            '"7", W/"8",, 9', " , 18446744073709551615, 18446744073709551616", '"07", "7"', "W/7 ,",
            "Bearer k3y-Secret_0", "bearer    k3y-Secret_0 \t", "Bearer  k3y-Secret_0x", "Basic k3y-Secret_0",
            "Bearer\tk3y-Secret_0"]):
        seed(H, f"value_{i}", v)
    for i, (v, k) in enumerate([("Bearer a b", "a b"), ("Bearer  x", " x"), ("Bearer x", "x\t"),
                                ("Bearer \u00e9t\u00e9", "\u00e9t\u00e9"), ("Bearer ", "")]):
        seed(H, f"key_{i}", v.encode() + b"\0" + k.encode())


# ---------------------------------------------------------------------------------------------
# fuzz_options: NUL-separated arguments (ATTND_X=v: the environment)

def options_seeds():
    H = "options"
    text = open(os.path.join(ROOT, "docs/configuration.md")).read()
    flags = sorted(set(re.findall(r"--[a-z][a-z-]+[a-z]", text)) - {"--some-name", "--ulimit"})
    values = ["64M", "2s", "500ms", "0", "1", "true", "off", "json", "0.0.0.0", "/tmp/x", "16384", "1T"]
    for i, f in enumerate(flags):
        v = values[i % len(values)]
        seed(H, f"flag_{f[2:]}", f"{f}={v}")
        seed(H, f"flag2_{f[2:]}", f"{f}\0{values[(i + 5) % len(values)]}")
        seed(H, f"twin_{f[2:]}", "ATTND_" + f[2:].upper().replace("-", "_") + "=" + v)
    for i, line in enumerate(re.findall(r"^\s*attnd( --[^\n`|]*)$", text, re.M)):
        seed(H, f"doc_{i}", "\0".join(line.split()))
    seed(H, "units", "--max-body-bytes=1KiB\0--max-body-memory\0002G\0--timeout=3000ms\0--watch-interval-ms=1s")
    seed(H, "less", "--max-body-memory=1M\0--max-body-bytes=2M")


# ---------------------------------------------------------------------------------------------
# fuzz_hf_checkpoint: a byte (layer, confined), then files "NAME\0" + 3-byte length + bytes

def hf_seeds():
    H = "hf_checkpoint"

    def files(fs):
        return b"".join(n.encode() + b"\0" + struct.pack("<I", len(d))[:3] + d for n, d in fs)

    cases_ = json.load(open(os.path.join(ROOT, "tests/data/hf/cases.json")))["cases"]
    for c in cases_:
        d = os.path.join(ROOT, "tests/data/hf", c["checkpoint"])
        fs = [(n, open(os.path.join(d, n), "rb").read()) for n in sorted(os.listdir(d))
              if n != "reference.safetensors"]
        for confined in (0, 8):
            seed(H, f"{c['checkpoint']}_{confined}", bytes([c["layer"] | confined]) + files(fs))
    bert = os.path.join(ROOT, "tests/data/hf/bert_base")
    cfg = open(os.path.join(bert, "config.json"), "rb").read()
    model = open(os.path.join(bert, "model.safetensors"), "rb").read()
    seed(H, "link_config_out", b"\x09" + files([("@config.json", b"../../outside/config.json"), ("model.safetensors", model)]))
    seed(H, "link_model_out", b"\x09" + files([("config.json", cfg), ("@model.safetensors", b"../../outside/model.safetensors")]))
    seed(H, "link_model_abs", b"\x09" + files([("config.json", cfg), ("@model.safetensors", b"/etc/passwd")]))
    seed(H, "link_inside", b"\x09" + files([("config.json", cfg), ("blob", model), ("@model.safetensors", b"blob")]))
    seed(H, "index_out", b"\x09" + files([("config.json", cfg), ("model.safetensors.index.json",
         json.dumps({"weight_map": {"bert.encoder.layer.1.attention.self.query.weight": "../../outside/model.safetensors"}}).encode())]))
    seed(H, "layer_huge", b"\x10" + files([("config.json", cfg), ("model.safetensors", model)]))


# ---------------------------------------------------------------------------------------------
# the older harnesses, from the same sources

def codec_seeds():
    tensors, bodies, b64 = [], [], []
    for name, g in golden():
        bodies.append((name, json.dumps({"config": g["config"], "weights": g["weights"]}).encode()))
        bodies.append((name + "_in", json.dumps(g["inputs"]).encode()))
        for k, t in list(g["inputs"].items()) + list(g["weights"].items()):
            if isinstance(t, dict) and "base64" in t:
                if len(t["base64"]) < 4096:
                    b64.append((f"{name}_{k}", t["base64"].encode()))
                shape = t["shape"]
                tensors.append((f"{name}_{k}_b64", json.dumps(t).encode()))
                if t.get("dtype", "float32") != "float32":
                    continue
                vals = b64_values(t)
                if len(vals) <= 512:
                    tensors.append((f"{name}_{k}_flat", json.dumps({"shape": shape, "data": vals}).encode()))
    for name, body, exp in cases():
        bodies.append(("case_" + name, body))
        try:
            for k, v in json.loads(body).items():
                if isinstance(v, (list, dict)):
                    tensors.append((f"case_{name}_{k}", json.dumps(v).encode()))
        except (ValueError, AttributeError, UnicodeDecodeError):
            tensors.append(("case_" + name, body))
    for i, (name, body) in enumerate(tensors):
        # rules byte: bool and -inf allowed for masks, default depth, every max_elements
        seed("tensor_parse", name[:90], bytes([(i % 4) << 5 | 3]) + body)
    for i, (name, body) in enumerate(bodies):
        seed("json_scan", name[:90], bytes([(i % 4) | 32 << 2]) + body)
    for name, text in b64:
        seed("base64", name[:90], text)
    for fname, data in st_files():
        seed("safetensors", fname, data)
    for name, c, w in datadir_files():
        seed("datadir", name, struct.pack("<H", len(c)) + c + w)
        cfg = json.loads(c)
        meta = {"format": "pt", "attnd.config": json.dumps(cfg, separators=(",", ":"), sort_keys=True),
                "attnd.version": "3"}
        seed("datadir", name + "_attnd", struct.pack("<H", len(c)) + c + safetensors(layer_params(cfg), meta))
        seed("datadir", name + "_repair", b"\0\0" + safetensors(layer_params(cfg), meta))
    for name, g in golden():
        inputs = []
        for k in ("query", "key", "value"):
            t = g["inputs"].get(k)
            if isinstance(t, dict) and "base64" in t and len(t["base64"]) < 6000 and \
                    t.get("dtype", "float32") == "float32":
                inputs.append((k, t))
        if not inputs or int(name[:3]) % 3:
            continue
        js = json.dumps({"id": name, "inputs": [{"name": k, "datatype": "FP32", "shape": t["shape"],
                                                   "data": b64_values(t)} for k, t in inputs]}).encode()
        seed("v2_request", name + "_json", b"\xff\xff" + js)
        hdr = json.dumps({"inputs": [{"name": k, "datatype": "FP32", "shape": t["shape"],
                                      "parameters": {"binary_data_size": len(base64.b64decode(t["base64"]))}}
                                     for k, t in inputs],
                          "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
        seed("v2_request", name + "_binary", struct.pack("<H", len(hdr)) + hdr
             + b"".join(base64.b64decode(t["base64"]) for _, t in inputs))


# ---------------------------------------------------------------------------------------------
# fuzz_datadir_tree: operations (kind, name, file/target, length, data) until FF, then actions

TREE_NAMES = ["a", "b", "victim", "x.y", ".hidden", "bad name", "c"]  # fuzz_datadir_tree.c's tables
TREE_FILES = ["config.json", "weights.safetensors", ".weights.safetensors.tmp-1-1", "other"]


def tree_seeds():
    H = "datadir_tree"
    cfg = b'{"embed_dim": 2, "num_heads": 1}'
    w = safetensors(layer_params({"embed_dim": 2, "num_heads": 1}))
    meta = {"format": "pt", "attnd.config": '{"add_bias_kv":false,"add_zero_attn":false,"batch_first":true,'
            '"bias":true,"dropout":0.0,"embed_dim":2,"kdim":2,"num_heads":1,"vdim":2}', "attnd.version": "4"}
    w_attnd = safetensors(layer_params({"embed_dim": 2, "num_heads": 1}), meta)

    def op(kind, name, fsel, data=b""):
        return bytes([kind, name, fsel]) + struct.pack("<H", len(data)) + data

    def act(kind, name=0):
        return bytes([name << 3 | kind])

    layer_b = op(1, 1, 0, cfg) + op(1, 1, 1, w)
    everything = b"".join(act(k, n) for n in (0, 1, 2) for k in (0, 1, 2, 3, 4, 5, 6))
    seeds_ = {
        "link_out_dir": op(2, 0, 0) + layer_b,              # layers/a -> ../../outside/victim
        "link_secret": op(2, 0, 1) + layer_b,               # layers/a -> outside/secret
        "link_root": op(2, 0, 2) + op(2, 6, 3) + op(2, 3, 4) + op(2, 2, 5),  # /, dangling, a loop, ../b
        "file_links": op(3, 0, 6) + op(1, 0, 0, cfg),       # layers/a/weights.safetensors -> outside
        "fifos": op(4, 0, 4) + op(4, 1, 1) + layer_b,       # layers/a FIFO; layers/b/weights FIFO (bit 2)
        "socket": op(5, 0, 1) + op(1, 0, 0, cfg),
        "sparse": op(6, 0, 1, w[:64]) + op(1, 0, 0, cfg),   # a weights file declaring 2^40 bytes
        "plain_file": op(7, 0, 0, cfg) + layer_b,
        "hidden": op(1, 4, 0, cfg) + op(1, 4, 1, w) + op(1, 5, 0, cfg) + layer_b,
        "temps": op(1, 1, 2, w) + layer_b,
        "repair": op(1, 1, 1, w_attnd) + op(1, 1, 2, cfg),  # an interrupted commit: no config.json
        "hand_edit": op(1, 1, 1, w_attnd) + op(1, 1, 0, b'{"embed_dim": 2, "num_heads": 1, "bias": true}'),
    }
    for name, ops in seeds_.items():
        seed(H, name, ops + b"\xff" + everything)
    # changes while the reader reads: armed before a read of b, each kind of change
    for c in range(8):
        seed(H, f"change_{c}", layer_b + b"\xff" + act(7, 1) + bytes([c * 2 + 1, c << 1 | (c & 1)])
             + act(2, 1) + act(0) + act(4, 1) + act(5, 1))


# ---------------------------------------------------------------------------------------------

def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    http_seeds()
    predecode_seeds()
    weights_put_seeds()
    headers_seeds()
    options_seeds()
    hf_seeds()
    codec_seeds()
    tree_seeds()
    for harness, files in OUT.items():
        d = os.path.join(out, harness)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"{d}: {len(files)} seeds, {sum(map(len, files.values())) // 1024} KB")


if __name__ == "__main__":
    main()
