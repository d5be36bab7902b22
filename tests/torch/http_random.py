#!/usr/bin/python3
"""http_random.py - random torch cases end to end over HTTP: attnd's /v1 forward and trace against torch.

Run with Debian's python3 and torch 1.13 (not part of `make test`, which never needs torch):

    /usr/bin/python3 tests/torch/http_random.py [--cases N] [--seed S] [--url URL] [--attnd PATH] [-v]

Without --url it starts build/attnd (or --attnd) on a free port of 127.0.0.1 and stops it at the end.
Every case is drawn from its own seed (printed on failure: rerun one with --seed S --only I).

What a case does (urllib only, no client library):
  - a layer with a random config (kdim/vdim != E, bias false, add_bias_kv, add_zero_attn,
    batch_first true/false/left out, H=1, E=1, odd sizes), torch's state_dict uploaded as a JSON map
    in PUT /v1/layers/{name} (every tensor in a random form), or as a safetensors file or a JSON map
    in PUT .../weights; GET .../weights must give the same bits back;
  - random inputs in random forms (nested, flat, base64; numbers written in several decimal styles),
    key/value left out or given, key_padding_mask and attn_mask (bool, float, "-inf", 2-D and 3-D),
    is_causal alone or with masks, need_weights / average_attn_weights given or left to their
    defaults, unbatched queries; some cases with extreme magnitudes (scores ~1e4, tiny and
    denormal values), fully masked rows and rows with a single allowed key;
  - the forward reply in a random encoding (sometimes all three, which must agree bit for bit), and
    for a share of cases the trace, every stage compared in the request's layout (some cases asking
    for a few stages only);
  - refusals: a valid case with one shape broken; torch must refuse it (its own shape checks) and
    attnd must answer 400, and the other way round.

The reference (README.md, "Coming from torch"): torch's general path, F.multi_head_attention_forward, with the masks merged
as torch 2.x does; where a row has no allowed key (torch: NaN), a step-by-step torch computation with
that row's weights and head output 0, checked against the functional call on every other row. The
trace stages come from the same step-by-step computation in float32, checked against float64.
Tolerance: the project's 2e-5 absolute + 1e-4 relative (tests/support/check.h); where torch's own
float32 result is further than that from the float64 one (large magnitudes), attnd may be as far
from float64 as twice torch's distance.
"""

import argparse
import base64
import json
import math
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import ctypes

import numpy as np
import torch
import torch.nn.functional as F

from torch_stages import attention_stages, head_weights

ATOL = 2e-5
RTOL = 1e-4
STAGES = ["q_proj", "k_proj", "v_proj", "q_heads", "k_heads", "v_heads", "scores", "attn_weights",
          "head_outputs", "concat", "output"]
HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "hr%d-" % os.getpid()    # layer names: runs sharing a daemon (--url) do not collide

_libc = ctypes.CDLL(None)
_libc.strtof.restype = ctypes.c_float
_libc.strtof.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


def strtof(text):
    """A JSON number read as float32 the way a C client reads it (correctly rounded, no detour
    through a double), returned as the Python float of that float32."""
    return float(_libc.strtof(text.encode(), None))


def read_int(text):
    """JSON integers stay ints (shapes), but "-0" keeps its sign."""
    return -0.0 if text == "-0" else int(text)


# ---------------------------------------------------------------------------------------------------
# HTTP

class Client:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def call(self, method, path, body=None, ctype="application/json", accept=None, chunks=None):
        """chunks: a random.Random; the body goes out with Transfer-Encoding: chunked, in pieces
        of random sizes."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if chunks is not None and data is not None:
            pieces, i = [], 0
            while i < len(data):
                n = chunks.choice([1, 7, 100, 4096, 65536, 1 << 20])
                pieces.append(data[i:i + n])
                i += n
            data = iter(pieces)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", ctype)
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, method, path, body=None, **kw):
        st, raw = self.call(method, path, body, **kw)
        try:
            return st, json.loads(raw, parse_float=strtof, parse_int=read_int) if raw else None, raw
        except ValueError:
            return st, None, raw


def start_daemon(binary):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    errlog = tempfile.TemporaryFile()
    proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port), "--log-format", "off",
                             "--threads", "2"], stdout=subprocess.DEVNULL, stderr=errlog)
    proc.errlog = errlog
    url = "http://127.0.0.1:%d" % port
    for _ in range(200):
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if proc.poll() is not None:
            errlog.seek(0)
            raise SystemExit("attnd exited: %s" % errlog.read().decode(errors="replace"))
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("attnd did not become ready")


# ---------------------------------------------------------------------------------------------------
# Tensors in attnd's JSON forms (docs/api.md)

def f32_text(x, rng):
    """A float32 value as JSON number text, in one of several styles that all read back exactly."""
    x = np.float32(x)
    if x == 0:
        if math.copysign(1.0, float(x)) < 0:
            return rng.choice(["-0", "-0.0", "-0e0"])
        return rng.choice(["0", "0.0", "0e0", "0E-3"])
    style = rng.randrange(4)
    if style == 0:
        return repr(float(x))                        # the double's shortest: exact value
    if style == 1:                                   # float32 shortest, as 1.5e-07 / 1.5E07
        s = np.format_float_scientific(x, unique=True, trim="-")
        return s.replace("+", "") if rng.random() < 0.5 else s.upper()
    if style == 2:
        return "%.9e" % float(x)                     # 9 significant digits: round-trips
    s = np.format_float_positional(x, unique=True, trim="-")
    return s if len(s) < 60 else repr(float(x))


def nested_text(t, rng, neg_inf_ok):
    if t.dim() == 0:
        v = t.item()
        if isinstance(v, bool):
            return "true" if v else "false"
        if v == float("-inf"):
            assert neg_inf_ok
            return '"-inf"'
        return f32_text(v, rng)
    sep = rng.choice([",", ", ", " ,\n "])
    return "[" + sep.join(nested_text(t[i], rng, neg_inf_ok) for i in range(t.shape[0])) + "]"


def enc_tensor(t, form, rng):
    """JSON text of tensor t (float32 or bool) in form nested / flat / base64."""
    t = t.detach().contiguous()
    is_bool = t.dtype == torch.bool
    if form == "nested":
        return nested_text(t, rng, True)
    if form == "flat":
        data = nested_text(t.reshape(-1), rng, True)
        parts = ['"shape": %s' % json.dumps(list(t.shape)), '"data": ' + data]
        if is_bool:
            if rng.random() < 0.7:
                parts.append('"dtype": "bool"')
        elif rng.random() < 0.7:
            parts.append('"dtype": "float32"')
        rng.shuffle(parts)
        return "{" + ", ".join(parts) + "}"
    if is_bool:
        raw = t.numpy().astype(np.uint8).tobytes()
        dtype = "bool"
    else:
        raw = t.numpy().astype("<f4").tobytes()
        dtype = "float32"
    parts = ['"shape": %s' % json.dumps(list(t.shape)), '"dtype": "%s"' % dtype,
             '"base64": "%s"' % base64.b64encode(raw).decode()]
    rng.shuffle(parts)
    return "{" + ", ".join(parts) + "}"


def obj_text(members):
    """A JSON object from (key, JSON text) pairs."""
    return "{" + ", ".join('"%s": %s' % (k, v) for k, v in members) + "}"


def shape_of_nested(v):
    shape = []
    while isinstance(v, list):
        shape.append(len(v))
        v = v[0]
    return shape


def dec_reply_tensor(v, raw_forms):
    """A reply tensor (any encoding) -> (float32 numpy array, shape, encoding)."""
    if isinstance(v, list) or isinstance(v, (int, float)):
        shape = shape_of_nested(v)
        arr = np.array(v, dtype=np.float64)
        return arr.astype(np.float32), shape, "nested"
    if "base64" in v:
        assert v.get("dtype", "float32") == "float32", v.get("dtype")
        arr = np.frombuffer(base64.b64decode(v["base64"]), dtype="<f4").reshape(v["shape"])
        return arr, list(v["shape"]), "base64"
    arr = np.array(v["data"], dtype=np.float64).astype(np.float32).reshape(v["shape"])
    return arr, list(v["shape"]), "flat"


ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def safetensors_bytes(sd, dtype="F32"):
    """A safetensors file of sd's tensors, converted to dtype (F32, F16, BF16, F64)."""
    header = {}
    blobs = []
    off = 0
    for k, v in sd.items():
        t = v.detach().contiguous().to(ST_DTYPES[dtype])
        if dtype in ("F16", "BF16"):
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.numpy().astype("<f8" if dtype == "F64" else "<f4").tobytes()
        header[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


# ---------------------------------------------------------------------------------------------------
# A case

class Case:
    pass


def draw_case(seed, want_trace):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    c = Case()
    c.seed = seed
    c.rng = rng
    c.medium = rng.random() < 0.15   # past the engine's tiles, AVX-512 head sizes, the thread pool
    c.H = rng.choice([1, 1, 2, 2, 3, 4])
    c.hd = rng.choice([1, 1, 2, 3, 4, 5, 8])
    if c.medium:
        c.H = rng.choice([1, 2, 3, 4])
        c.hd = rng.choice([16, 16, 32, 48, 8, 12])
    c.E = c.H * c.hd
    c.kind = rng.choice(["self", "self", "self_explicit", "kv", "cross", "cross", "cross"])
    c.kdim = c.vdim = c.E
    if c.kind == "kv" and rng.random() < 0.5:
        c.kdim = c.vdim = rng.randint(1, 9)
    if c.kind == "cross" and rng.random() < 0.6:
        c.kdim, c.vdim = rng.randint(1, 9), rng.randint(1, 9)
    c.bias = rng.random() < 0.75
    c.bkv = rng.random() < 0.3
    c.za = rng.random() < 0.3
    c.bf_field = rng.choice([True, False, None])          # None: left out (default true)
    c.batch_first = c.bf_field is not False
    c.unbatched = rng.random() < 0.2
    c.N = 1 if c.unbatched else rng.randint(1, 3)
    c.L = rng.choice([1, 1, 2, 3, 4, 5, 7])
    c.S0 = c.L if c.kind in ("self", "self_explicit") else rng.choice([1, 1, 2, 3, 5, 6, 8])
    if c.medium:
        c.N = 1 if c.unbatched else rng.randint(1, 2)
        c.L = rng.randint(1, 160)
        c.S0 = c.L if c.kind in ("self", "self_explicit") else rng.randint(1, 160)
    c.extreme = rng.choice([None] * 8 + ["large", "tiny", "denormal"])
    c.kpm_kind = rng.choice([None, None, "bool", "float", "float_inf", "bool_full", "float_full",
                             "bool_one", "float_huge"])
    c.mask_kind = rng.choice([None, None, "bool2", "float2", "float2_inf", "bool3", "float3",
                              "float3_inf", "bool2_full", "bool3_one", "float2_huge", "float3_huge"])
    c.is_causal = rng.random() < 0.3
    c.nw_field = rng.choice([True, True, False, None])    # None: left out (default false)
    c.need_weights = c.nw_field is True
    c.avg_field = rng.choice([True, False, False, None])  # None: left out (default true)
    c.average = c.avg_field is not False
    c.encodings = rng.choice([["nested"], ["flat"], ["base64"], [None], ["nested", "flat", "base64"]])
    c.trace = rng.random() < (0.15 if c.medium else 0.35) and want_trace
    c.upload = rng.choice(["put_json", "put_json", "weights_safetensors", "weights_json"])
    c.st_dtype = "F32"
    if c.upload == "weights_safetensors":
        c.st_dtype = rng.choice(["F32", "F32", "F16", "BF16", "F64"])

    mod = torch.nn.MultiheadAttention(c.E, c.H, bias=c.bias, add_bias_kv=c.bkv, add_zero_attn=c.za,
                                      kdim=c.kdim, vdim=c.vdim, batch_first=c.batch_first)
    mod.eval()
    with torch.no_grad():
        for name, p in mod.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if "bias" in name else
                                                           1.0 / math.sqrt(p.shape[-1])))
    c.mod = mod
    c.sd = {k: v.detach().clone() for k, v in mod.state_dict().items()}
    if c.st_dtype != "F32":
        # the file's values, as torch's load_state_dict (copy_) turns them into float32: F64 with
        # more digits than float32 holds (rounded), F16 with some of its subnormals
        with torch.no_grad():
            for k, v in c.sd.items():
                if c.st_dtype == "F64":
                    x = v.double() * (1 + 1e-7 * torch.randn(v.shape, generator=gen, dtype=torch.float64))
                else:
                    x = v.to(ST_DTYPES[c.st_dtype])
                    if c.st_dtype == "F16":
                        x = torch.where(torch.rand(v.shape, generator=gen) < 0.1,
                                        (torch.randn(v.shape, generator=gen) * 1e-6).half(), x)
                c.sd[k] = x
            c.file_sd = c.sd
            mod.load_state_dict(c.sd)
            c.sd = {k: v.detach().clone() for k, v in mod.state_dict().items()}

    scale = 1.0
    if c.extreme == "large":
        scale = rng.choice([30.0, 100.0, 300.0])      # scores up to ~1e4-1e5
    elif c.extreme == "tiny":
        scale = rng.choice([1e-6, 1e-12, 1e-19])
    c.scale = scale

    def seq(length, feat):
        if c.unbatched:
            shape = (length, feat)
        elif c.batch_first:
            shape = (c.N, length, feat)
        else:
            shape = (length, c.N, feat)
        x = torch.randn(shape, generator=gen) * scale
        if c.extreme == "denormal":
            # some exact denormals, zeros and negative zeros among ordinary values
            r = torch.rand(shape, generator=gen)
            x = torch.where(r < 0.15, torch.randn(shape, generator=gen) * 1e-41, x)
            x = torch.where((r >= 0.15) & (r < 0.2), torch.tensor(-0.0), x)
        return x.to(torch.float32)

    c.query = seq(c.L, c.E)
    c.key = c.value = None
    if c.kind == "self_explicit":
        c.key = c.query.clone()
        c.value = c.query.clone()
    elif c.kind == "kv":
        c.key = seq(c.S0, c.kdim)
    elif c.kind == "cross":
        c.key = seq(c.S0, c.kdim)
        c.value = seq(c.S0, c.vdim)

    N, H, L, S0 = c.N, c.H, c.L, c.S0
    kshape = (S0,) if c.unbatched else (N, S0)
    c.kpm = None
    k = c.kpm_kind
    if k == "bool":
        c.kpm = torch.rand(kshape, generator=gen) < 0.3
    elif k == "float":
        c.kpm = torch.randn(kshape, generator=gen)
    elif k == "float_inf":
        c.kpm = torch.where(torch.rand(kshape, generator=gen) < 0.3, torch.tensor(float("-inf")),
                            torch.randn(kshape, generator=gen))
    elif k == "float_huge":         # large finite values: -1e9 (HF style), -1e30, finfo.min, +1e20
        c.kpm = huge_mask(kshape, gen, rng)
    elif k == "bool_full":          # every key of one batch masked
        c.kpm = torch.rand(kshape, generator=gen) < 0.2
        c.kpm[..., :] = c.kpm[..., :]
        if c.unbatched:
            c.kpm[:] = True
        else:
            c.kpm[rng.randrange(N), :] = True
    elif k == "float_full":
        c.kpm = torch.randn(kshape, generator=gen)
        if c.unbatched:
            c.kpm[:] = float("-inf")
        else:
            c.kpm[rng.randrange(N), :] = float("-inf")
    elif k == "bool_one":           # a single allowed key per batch
        c.kpm = torch.ones(kshape, dtype=torch.bool)
        if c.unbatched:
            c.kpm[rng.randrange(S0)] = False
        else:
            for b in range(N):
                c.kpm[b, rng.randrange(S0)] = False

    c.attn_mask = None
    m = c.mask_kind
    if m:
        three = "3" in m
        if three:
            shape = (H, L, S0) if c.unbatched else (N * H, L, S0)
        else:
            shape = (L, S0)
        if m.endswith("_huge"):
            c.attn_mask = huge_mask(shape, gen, rng)
        elif m.startswith("bool"):
            c.attn_mask = torch.rand(shape, generator=gen) < 0.3
            if m.endswith("_full"):
                c.attn_mask[..., rng.randrange(L), :] = True
            if m.endswith("_one"):
                c.attn_mask = torch.ones(shape, dtype=torch.bool)
                for idx in np.ndindex(*shape[:-1]):
                    c.attn_mask[idx + (rng.randrange(S0),)] = False
        else:
            c.attn_mask = torch.randn(shape, generator=gen)
            if m.endswith("_inf"):
                c.attn_mask = torch.where(torch.rand(shape, generator=gen) < 0.3,
                                          torch.tensor(float("-inf")), c.attn_mask)
    return c


def huge_mask(shape, gen, rng):
    big = torch.tensor(rng.choice([-1e9, -1e30, float(np.finfo(np.float32).min), 1e20]))
    m = torch.randn(shape, generator=gen)
    return torch.where(torch.rand(shape, generator=gen) < 0.4, big, m)


def config_of(c):
    cfg = {"embed_dim": c.E, "num_heads": c.H}
    r = c.rng
    if c.kdim != c.E or r.random() < 0.3:
        cfg["kdim"] = c.kdim
    if c.vdim != c.E or r.random() < 0.3:
        cfg["vdim"] = c.vdim
    if not c.bias or r.random() < 0.3:
        cfg["bias"] = c.bias
    if c.bkv or r.random() < 0.2:
        cfg["add_bias_kv"] = c.bkv
    if c.za or r.random() < 0.2:
        cfg["add_zero_attn"] = c.za
    if c.bf_field is not None:
        cfg["batch_first"] = c.bf_field
    if r.random() < 0.3:
        cfg["dropout"] = r.choice([0.0, 0.1, 0.5, 1.0])   # accepted; eval mode never drops
    return cfg


FORMS = ["nested", "flat", "base64"]


def request_text(c, query, key, value, kpm, attn_mask, encoding, omit=()):
    r = c.rng
    members = [("query", enc_tensor(query, r.choice(FORMS), r))]
    if key is not None:
        members.append(("key", enc_tensor(key, r.choice(FORMS), r)))
    elif r.random() < 0.1:
        members.append(("key", "null"))
    if value is not None:
        members.append(("value", enc_tensor(value, r.choice(FORMS), r)))
    if kpm is not None:
        members.append(("key_padding_mask", enc_tensor(kpm, r.choice(FORMS), r)))
    if attn_mask is not None:
        members.append(("attn_mask", enc_tensor(attn_mask, r.choice(FORMS), r)))
    if c.is_causal or r.random() < 0.2:
        members.append(("is_causal", json.dumps(c.is_causal)))
    if c.nw_field is not None:
        members.append(("need_weights", json.dumps(c.nw_field)))
    if c.avg_field is not None:
        members.append(("average_attn_weights", json.dumps(c.avg_field)))
    if encoding is not None:
        members.append(("encoding", json.dumps(encoding)))
    members = [m for m in members if m[0] not in omit]
    r.shuffle(members)
    return obj_text(members).encode()


# ---------------------------------------------------------------------------------------------------
# torch's numbers

def to_additive(m):
    if m.dtype == torch.bool:
        return torch.zeros(m.shape, dtype=torch.float64).masked_fill(m, float("-inf"))
    return m.to(torch.float64)


def merged_mask(c, dtype):
    """torch 2.x merge of key_padding_mask + attn_mask + causal: [N*H, L, S0] or None."""
    N, H, L, S0 = c.N, c.H, c.L, c.S0
    total = None
    if c.kpm is not None:
        k = to_additive(c.kpm).reshape(N, 1, 1, S0).expand(N, H, L, S0).reshape(N * H, L, S0)
        total = k
    if c.attn_mask is not None:
        a = to_additive(c.attn_mask)
        a = a.reshape(1, L, S0).expand(N * H, L, S0) if a.dim() == 2 else a.reshape(N * H, L, S0)
        total = a if total is None else total + a
    if c.is_causal:
        cm = to_additive(torch.triu(torch.ones(L, S0, dtype=torch.bool), 1)).expand(N * H, L, S0)
        total = cm if total is None else total + cm
    # the sum is done in float64 then rounded: for two float32 terms that is the float32 sum
    return None if total is None else total.to(dtype).contiguous()


def seq_first(c, t):
    if t is None:
        return None
    if c.unbatched:
        return t.unsqueeze(1)
    return t.transpose(0, 1) if c.batch_first else t


def from_seq_first(c, out):
    if c.unbatched:
        return out.squeeze(1).contiguous()
    return (out.transpose(0, 1) if c.batch_first else out).contiguous()


def api_view(c, name, t):
    """A batch-major stage of the step-by-step reference as the trace answers it (server/api/trace.h):
    output and attn_weights as forward answers them (the weights averaged over the heads unless
    average_attn_weights is false), q_proj/k_proj/v_proj/concat in the layer's layout, the per-head
    stages in [N,H,...] order; no N for an unbatched query. Returns the tensor and its axes."""
    axes = {"q_proj": "NLE", "k_proj": "NSE", "v_proj": "NSE", "q_heads": "NHLD", "k_heads": "NHSD",
            "v_heads": "NHSD", "scores": "NHLS", "attn_weights": "NHLS", "head_outputs": "NHLD",
            "concat": "NLE", "output": "NLE"}[name]
    if name == "attn_weights" and c.average:
        t, axes = t.mean(dim=1), "NLS"
    if c.unbatched:
        t, axes = t.squeeze(0), axes[1:]
    elif not c.batch_first and name in ("q_proj", "k_proj", "v_proj", "concat", "output"):
        t, axes = t.transpose(0, 1), axes[1] + axes[0] + axes[2]
    return t.contiguous(), list(axes)


def step_by_step(c, dtype):
    """Every stage in torch 1.13's order (batch-major stages); dead rows weights 0."""
    sd = {k: v.to(dtype) for k, v in c.sd.items()}
    q_in = seq_first(c, c.query).to(dtype)
    k_in = q_in if c.key is None else seq_first(c, c.key).to(dtype)
    v_in = k_in if c.value is None else seq_first(c, c.value).to(dtype)
    st, out, w, dead = attention_stages(q_in, k_in, v_in, sd, c.H, merged_mask(c, dtype), c.bkv,
                                        c.za, dtype)
    weights = None
    if c.need_weights:
        weights = head_weights(w, c.N, c.H, c.average)
        if c.unbatched:
            weights = weights.squeeze(0)
    return st, from_seq_first(c, out), weights, dead


def functional(c):
    """F.multi_head_attention_forward (torch's general path), grad enabled, merged float mask."""
    sd = c.sd
    q = seq_first(c, c.query)
    k = q if c.key is None else seq_first(c, c.key)
    v = k if c.value is None else seq_first(c, c.value)
    packed = "in_proj_weight" in sd
    with torch.enable_grad():
        out, w = F.multi_head_attention_forward(
            q, k, v, c.E, c.H, sd.get("in_proj_weight"), sd.get("in_proj_bias"), sd.get("bias_k"),
            sd.get("bias_v"), c.za, 0.0, sd["out_proj.weight"], sd.get("out_proj.bias"),
            training=False, key_padding_mask=None, need_weights=c.need_weights,
            attn_mask=merged_mask(c, torch.float32), use_separate_proj_weight=not packed,
            q_proj_weight=sd.get("q_proj_weight"), k_proj_weight=sd.get("k_proj_weight"),
            v_proj_weight=sd.get("v_proj_weight"), average_attn_weights=c.average)
    out = from_seq_first(c, out.detach())
    if w is not None:
        w = w.detach()
        if c.unbatched:
            w = w.squeeze(0)
    return out, w


def torch_native(c, query, key, value, kpm, attn_mask):
    """torch's own shape checks and mask handling (nn.MultiheadAttention, grad enabled): raises
    where torch refuses the shapes."""
    mod = c.mod
    k = query if key is None else key
    v = k if value is None else value
    if kpm is not None and kpm.dtype != torch.bool:
        # torch 1.13 cannot merge a float key_padding_mask with an attn_mask (torch 2.x can, and
        # attnd follows 2.x): the same shape as bool, for the shape checks
        kpm = kpm != 0
    with torch.enable_grad():
        return mod(query, k, v, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=c.need_weights,
                   average_attn_weights=c.average)


# ---------------------------------------------------------------------------------------------------
# Comparison

def violation(got, t32, t64, atol=ATOL, large=False):
    """Max over elements of how far got is outside the tolerance around torch's float32 result
    (t32), with the float64 fallback; <= 0 means fine. NaN/inf anywhere in got is a failure
    unless torch has the same value there (-inf scores). large (inputs of magnitude 30-300): values
    computed by cancellation are only as exact as the largest of their row, so the fallback allows
    a few float32 ulps of the row's largest value and 4x torch's largest distance from float64."""
    got = np.asarray(got, dtype=np.float64)
    a = t32.to(torch.float64).numpy()
    e = t64.to(torch.float64).numpy()
    if got.shape != a.shape:
        return float("inf"), "shape %s, torch %s" % (list(got.shape), list(a.shape))
    inf_g, inf_a = np.isinf(got), np.isinf(a)
    if not np.array_equal(inf_g, inf_a) or not np.array_equal(got[inf_g], a[inf_a]):
        return float("inf"), "infinities differ"
    if np.isnan(got).any():
        return float("inf"), "NaN in reply"
    fin = ~inf_a & ~np.isnan(a)
    rowmax = np.zeros_like(e)
    if large and e.ndim:
        ef = np.where(np.isfinite(e), np.abs(e), 0)
        rowmax = np.broadcast_to(ef.max(axis=-1, keepdims=True), e.shape)
    g, a, e, rowmax = got[fin], a[fin], e[fin], rowmax[fin]
    if g.size == 0:
        return 0.0, ""
    v1 = np.abs(g - a) - (atol + RTOL * np.abs(a))
    if large:
        # ill-conditioned (scores ~1e4): which elements round badly is luck, so attnd's distance
        # from float64 is held to a few times torch's largest distance over the whole tensor
        v2 = np.abs(g - e) - (atol + RTOL * np.abs(e) + 4 * np.abs(a - e).max() + 4e-7 * rowmax)
    else:
        v2 = np.abs(g - e) - (atol + RTOL * np.abs(e) + 2 * np.abs(a - e))
    v = np.minimum(v1, v2)
    i = int(np.argmax(v))
    return float(v[i]), "at flat %d: got %.9g torch %.9g float64 %.9g" % (i, g[i], a[i], e[i])


# ---------------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, client, verbose):
        self.cl = client
        self.verbose = verbose
        self.failures = []
        self.counts = {}

    def count(self, what, n=1):
        self.counts[what] = self.counts.get(what, 0) + n

    def fail(self, c, what):
        where = ("--seed %d --only %d" % divmod(c.seed, 1000003)) if c.seed >= 0 else "big case %d" % -c.seed
        msg = "%s: %s" % (where, what)
        self.failures.append(msg)
        print("FAIL " + msg + "\n     " + describe(c), flush=True)

    def upload(self, c, name):
        r = c.rng
        cfg = config_of(c)
        if c.upload == "put_json":
            w = obj_text([(k, enc_tensor(v, r.choice(FORMS), r)) for k, v in c.sd.items()])
            body = ('{"config": %s, "weights": %s}' % (json.dumps(cfg), w)).encode()
            st, j, raw = self.cl.json("PUT", "/v1/layers/" + name, body)
            if st not in (200, 201):
                return self.fail(c, "PUT layer with weights: %d %s" % (st, raw[:300]))
        else:
            st, j, raw = self.cl.json("PUT", "/v1/layers/" + name,
                                      {"config": cfg, "init": {"method": "xavier_uniform", "seed": 1}})
            if st not in (200, 201):
                return self.fail(c, "PUT layer: %d %s" % (st, raw[:300]))
            if c.upload == "weights_safetensors":
                sd = c.file_sd if c.st_dtype != "F32" else c.sd
                st, raw = self.cl.call("PUT", "/v1/layers/%s/weights" % name,
                                       safetensors_bytes(sd, c.st_dtype), ctype="application/octet-stream")
            else:
                w = obj_text([(k, enc_tensor(v, r.choice(FORMS), r)) for k, v in c.sd.items()])
                st, raw = self.cl.call("PUT", "/v1/layers/%s/weights" % name, w.encode())
            if st not in (200, 201, 204):
                return self.fail(c, "PUT weights (%s): %d %s" % (c.upload, st, raw[:300]))
        # the weights read back bit for bit
        st, j, raw = self.cl.json("GET", "/v1/layers/%s/weights?encoding=%s" % (name, r.choice(FORMS)))
        if st != 200:
            return self.fail(c, "GET weights: %d" % st)
        if set(j) != set(c.sd):
            return self.fail(c, "weights names %s, torch %s" % (sorted(j), sorted(c.sd)))
        for k, v in c.sd.items():
            arr, shape, _ = dec_reply_tensor(j[k], None)
            if shape != list(v.shape) or arr.tobytes() != v.numpy().astype("<f4").tobytes():
                return self.fail(c, "weights %s do not read back (shape %s, torch %s)"
                                 % (k, shape, list(v.shape)))
        self.count("layers")
        self.count("uploads %s" % (c.upload + ("_" + c.st_dtype if c.upload == "weights_safetensors" else "")))
        return True

    def run_case(self, c):
        name = PREFIX + "%d" % c.seed
        if self.upload(c, name) is not True:
            return
        try:
            self.forward(c, name)
            if c.trace:
                self.trace(c, name)
            self.refusal(c, name)
        finally:
            self.cl.call("DELETE", "/v1/layers/" + name)

    def forward(self, c, name):
        st32, out_s, w_s, dead = step_by_step(c, torch.float32)
        st64, out64, w64, _ = step_by_step(c, torch.float64)
        any_dead = bool(dead.any())
        f_out, f_w = functional(c)
        if any_dead:
            ref_out, ref_w = out_s, w_s
        else:
            ref_out, ref_w = f_out, f_w
            # the step-by-step computation agrees with torch's (its trace reference is sound)
            if violation(out_s.numpy(), f_out, out64, ATOL, c.extreme == "large")[0] > 0:
                return self.fail(c, "reference: step-by-step output differs from functional")
        replies = {}
        for encoding in c.encodings:
            body = request_text(c, c.query, c.key, c.value, c.kpm, c.attn_mask, encoding)
            chunks = c.rng if c.rng.random() < 0.2 else None
            if chunks:
                self.count("chunked bodies")
            st, j, raw = self.cl.json("POST", "/v1/layers/%s/forward" % name, body, chunks=chunks)
            if st != 200:
                return self.fail(c, "forward: %d %s" % (st, raw[:400]))
            want = {"output"} | ({"attn_weights"} if c.need_weights else set())
            if set(j) != want:
                return self.fail(c, "reply members %s, want %s" % (sorted(j), sorted(want)))
            self.count("forward requests")
            enc = encoding or "nested"
            for key, ref, ref64 in (("output", ref_out, out64), ("attn_weights", ref_w, w64)):
                if key not in j:
                    continue
                arr, shape, got_enc = dec_reply_tensor(j[key], None)
                if got_enc != enc:
                    return self.fail(c, "%s in encoding %s, asked %s" % (key, got_enc, enc))
                if shape != list(ref.shape):
                    return self.fail(c, "%s shape %s, torch %s" % (key, shape, list(ref.shape)))
                # tiny inputs without biases: the absolute tolerance scales with the values
                atol = ATOL * c.scale if c.extreme == "tiny" and not c.bias else ATOL
                if key == "attn_weights":
                    atol = ATOL
                v, where = violation(arr, ref, ref64, atol, c.extreme == "large")
                if v > 0:
                    return self.fail(c, "%s (%s) off by %.3g: %s" % (key, enc, v, where))
                replies.setdefault(key, []).append(arr)
                self.count("tensors compared")
        for key, arrs in replies.items():
            for a in arrs[1:]:
                if a.tobytes() != arrs[0].tobytes():
                    return self.fail(c, "%s differs between encodings %s" % (key, c.encodings))
        if len(c.encodings) > 1:
            self.count("encoding triples bit-identical")

    def trace(self, c, name):
        st32, _, _, _ = step_by_step(c, torch.float32)
        st64, _, _, _ = step_by_step(c, torch.float64)
        enc = c.rng.choice(FORMS + [None])
        body = request_text(c, c.query, c.key, c.value, c.kpm, c.attn_mask, enc)
        want = STAGES
        if c.rng.random() < 0.4:  # some stages only, asked in any order
            want = [n for n in STAGES if c.rng.random() < 0.5] or ["scores"]
            asked = list(want)
            c.rng.shuffle(asked)
            body = b'{"stages": ' + json.dumps(asked).encode() + b", " + body[1:]
        st, j, raw = self.cl.json("POST", "/v1/layers/%s/trace" % name, body)
        if st != 200:
            return self.fail(c, "trace: %d %s" % (st, raw[:400]))
        names = [s["name"] for s in j["stages"]]
        if names != want:
            return self.fail(c, "trace stages %s, asked %s" % (names, want))
        for s in j["stages"]:
            ref, axes = api_view(c, s["name"], st32[s["name"]])
            ref64, _ = api_view(c, s["name"], st64[s["name"]])
            arr, shape, _ = dec_reply_tensor(s["tensor"], None)
            if s["shape"] != list(ref.shape) or shape != list(ref.shape):
                return self.fail(c, "trace %s shape %s / %s, torch %s" % (s["name"], s["shape"], shape,
                                                                          list(ref.shape)))
            if s.get("axes") != axes:
                return self.fail(c, "trace %s axes %s, want %s" % (s["name"], s.get("axes"), axes))
            atol = ATOL
            if c.extreme == "tiny" and not c.bias and s["name"] != "attn_weights":
                atol = ATOL * (c.scale * c.scale if s["name"] == "scores" else c.scale)
            v, where = violation(arr, ref, ref64, atol, c.extreme == "large")
            if v > 0:
                return self.fail(c, "trace %s off by %.3g: %s" % (s["name"], v, where))
        self.count("traces compared")

    def refusal(self, c, name):
        """One input with a broken shape: torch and attnd must agree on refusing it."""
        r = c.rng
        q, k, v, kpm, am = c.query, c.key, c.value, c.kpm, c.attn_mask
        options = ["query_E", "query_ndim"]
        if k is not None:
            options += ["key_feat", "key_len", "key_batch", "key_ndim"]
        if v is not None:
            options += ["value_feat", "value_len", "value_ndim"]
        if kpm is not None:
            options += ["kpm_len", "kpm_ndim"] + ([] if c.unbatched else ["kpm_batch", "kpm_1d"])
        if am is not None:
            options += ["am_L", "am_S", "am_4d", "am_1d"] + (["am_heads"] if am.dim() == 3 else [])
            if am.dim() == 3 and c.N > 1:
                options.append("am_heads_only")
        what = r.choice(options)

        def grow(t, dim):
            extra = t.narrow(dim, 0, 1)
            return torch.cat([t, extra], dim=dim)

        def seq_dim(t):      # the sequence dimension of a batched/unbatched input tensor
            return 0 if (c.unbatched or not c.batch_first) else 1

        def batch_dim():
            return 0 if c.batch_first else 1

        if what == "query_E":
            q = grow(q, q.dim() - 1)
        elif what == "query_ndim":
            q = q.unsqueeze(0) if r.random() < 0.5 else q.reshape(-1)
        elif what == "key_feat":
            k = grow(k, k.dim() - 1)
        elif what == "key_len":
            k = grow(k, seq_dim(k))
        elif what == "key_batch":
            if c.unbatched:
                k = k.unsqueeze(batch_dim())
            else:
                k = grow(k, batch_dim())
        elif what == "key_ndim":
            k = k[0] if k.dim() == 3 else k.unsqueeze(batch_dim())
        elif what == "value_ndim":
            v = v[0] if v.dim() == 3 else v.unsqueeze(batch_dim())
        elif what == "kpm_1d":
            kpm = kpm[0]
        elif what == "am_1d":
            am = am.reshape(-1)[: c.S0]
        elif what == "am_heads_only":
            am = am[: c.H]
        elif what == "value_feat":
            v = grow(v, v.dim() - 1)
        elif what == "value_len":
            v = grow(v, seq_dim(v))
        elif what == "kpm_len":
            kpm = grow(kpm, kpm.dim() - 1)
        elif what == "kpm_ndim":
            kpm = kpm.unsqueeze(0)
        elif what == "kpm_batch":
            kpm = grow(kpm, 0)
        elif what == "am_L":
            am = grow(am, am.dim() - 2)
        elif what == "am_S":
            am = grow(am, am.dim() - 1)
        elif what == "am_4d":
            am = am.unsqueeze(0)
        elif what == "am_heads":
            am = grow(am, 0)
        torch_ok = True
        try:
            # torch's own checks; is_causal needs a mask in torch 1.13, and has none to check
            torch_native(c, q, k, v, kpm, am)
        except Exception as e:      # noqa: BLE001 - any refusal by torch
            torch_ok = False
            torch_msg = str(e).split("\n")[0]
        body = request_text(c, q, k, v, kpm, am, None)
        st, j, raw = self.cl.json("POST", "/v1/layers/%s/forward" % name, body)
        self.count("refusal probes (torch %s)" % ("accepts" if torch_ok else "refuses"))
        if torch_ok and st != 200:
            return self.fail(c, "broken %s: torch accepts, attnd %d %s" % (what, st, raw[:300]))
        if not torch_ok and st != 400:
            return self.fail(c, "broken %s: torch refuses (%s), attnd %d" % (what, torch_msg, st))
        if st == 400 and not (isinstance(j, dict) and "error" in j and j["error"].get("message")):
            return self.fail(c, "broken %s: 400 without an error body" % what)


# ---------------------------------------------------------------------------------------------------
# Numbers at the edges of float32: parsing and writing, end to end

FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)
TRUE_MIN = float(np.float32(1.4e-45))


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def special_values(rng, n):
    """n finite float32 values: the edges (±0, ±FLT_MAX, ±FLT_MIN, ±smallest denormal, denormals,
    powers of ten) and random bit patterns over every exponent."""
    vals = [0.0, -0.0, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, TRUE_MIN, -TRUE_MIN,
            float(np.float32(FLT_MIN - TRUE_MIN)), float(np.float32(3 * TRUE_MIN)),
            float(np.nextafter(np.float32(FLT_MAX), np.float32(0))), 1.0, -1.0, 0.1, 1e-4, 9.999999e-5,
            1e9, 999999940.0, 16777216.0, 16777218.0, 3.4e38, 1e-38, 1e-45, 123456789.0,
            0.30000001192092896, 1e10, 1e-10]
    vals = [float(np.float32(v)) for v in vals]
    while len(vals) < n:
        u = rng.getrandbits(32)
        if (u >> 23) & 0xFF == 0xFF:
            continue
        vals.append(struct.unpack("<f", struct.pack("<I", u))[0])
    rng.shuffle(vals)
    return vals[:n]


# Decimal texts that are hard to round to float32 (midpoints, long mantissas, range edges) and what
# strtof (correct rounding) makes of them; texts that round to infinity must be refused.
HARD_TEXTS = ["1.000000059604644775390625", "1.0000000596046447753906250000000001",
              "1.00000005960464477539062499999999", "0.1000000000000000055511151231257827",
              "3.4028235677973365e38", "3.4028235e38", "3.40282356e38", "340282346638528859811704183484516925440",
              "7.0064923216240854e-46", "7.006492321624086e-46", "7e-46", "1.4e-45", "1e-46",
              "1.1754942807573643e-38", "1.17549428e-38", "1.1754943508222875e-38", "-1e-50",
              "2.2250738585072014e-308", "1e-400", "0.000000000000000000000000000000000000000001",
              "123456789012345678901234567890", "9007199254740993", "16777217", "16777219",
              "4.9406564584124654e-324", "0.99999997", "0.999999970197677612304687",
              "1e-7", "1E+2", "-0.0e-0", "1.5e0000000000000000000001"]
HARD_TEXTS += ["3.4028235677973366e38", "3.4028235677973367e38", "3.4028236e38", "1e39", "-1e39",
               "1e400", "340282356779733661637539395458142568448", "340282356779733661637539395458142568447",
               "-340282356779733661637539395458142568448"]
INF_TEXTS = [t for t in HARD_TEXTS if math.isinf(strtof(t))]
HARD_TEXTS = [t for t in HARD_TEXTS if not math.isinf(strtof(t))]


def specials(run, rng):
    cl = run.cl
    E, H = 8, 2
    mod = torch.nn.MultiheadAttention(E, H, batch_first=True)
    sd = {k: v.detach().clone() for k, v in mod.state_dict().items()}
    # 1. every weight a special value: uploaded as nested text, read back in every encoding
    w = special_values(rng, 3 * E * E)
    sd["in_proj_weight"] = torch.tensor(w, dtype=torch.float32).reshape(3 * E, E)
    texts = []
    for x in w:
        texts.append(f32_text(x, rng))
    nested = "[" + ",".join("[" + ",".join(texts[r * E:(r + 1) * E]) + "]" for r in range(3 * E)) + "]"
    members = [("in_proj_weight", nested)] + [(k, enc_tensor(v, "base64", rng)) for k, v in sd.items()
                                               if k != "in_proj_weight"]
    body = '{"config": {"embed_dim": 8, "num_heads": 2}, "weights": %s}' % obj_text(members)
    st, j, raw = cl.json("PUT", "/v1/layers/" + PREFIX + "specials", body.encode())
    if st not in (200, 201):
        run.failures.append("specials: PUT: %d %s" % (st, raw[:300]))
        print("FAIL specials PUT %d %s" % (st, raw[:300]))
        return
    want = [f32_bits(x) for x in w]
    for encoding in FORMS:
        st, j, raw = cl.json("GET", "/v1/layers/" + PREFIX + "specials/weights?encoding=" + encoding)
        arr, shape, _ = dec_reply_tensor(j["in_proj_weight"], None)
        got = [f32_bits(float(x)) for x in arr.reshape(-1)]
        bad = [(i, w[i], float(arr.reshape(-1)[i])) for i in range(len(w)) if got[i] != want[i]]
        if bad:
            run.failures.append("specials: weights in %s do not read back: %s" % (encoding, bad[:5]))
            print("FAIL specials: weights in %s do not read back: %s" % (encoding, bad[:5]))
        if encoding != "base64":
            # shortest: no decimal with fewer significant digits reads back the same
            for tok in number_tokens(raw.decode()):
                sig = len(tok.lstrip("-").split("e")[0].replace(".", "").strip("0")) or 1
                if sig > 1 and shorter_exists(tok, sig):
                    run.failures.append("specials: %s is not the shortest form" % tok)
                    print("FAIL specials: %s is not the shortest form" % tok)
                    break
        run.count("special weights read back")

    # 2. hard decimal texts: out_proj.bias entries, read back as strtof reads them
    for i in range(0, len(HARD_TEXTS), E):
        chunk = (HARD_TEXTS[i:i + E] + ["0"] * E)[:E]
        members = [(k, enc_tensor(v, "base64", rng)) for k, v in sd.items() if k != "out_proj.bias"]
        members.append(("out_proj.bias", "[" + ",".join(chunk) + "]"))
        st, raw = cl.call("PUT", "/v1/layers/" + PREFIX + "specials/weights", obj_text(members).encode())
        if st not in (200, 204):
            run.failures.append("specials: hard texts %s: %d %s" % (chunk, st, raw[:300]))
            print("FAIL specials: hard texts %s: %d %s" % (chunk, st, raw[:300]))
            continue
        st, j, raw = cl.json("GET", "/v1/layers/" + PREFIX + "specials/weights?encoding=base64")
        arr, _, _ = dec_reply_tensor(j["out_proj.bias"], None)
        for t, x in zip(chunk, arr):
            if f32_bits(float(x)) != f32_bits(strtof(t)):
                run.failures.append("specials: %s read as %r, strtof %r" % (t, float(x), strtof(t)))
                print("FAIL specials: %s read as %r, strtof %r" % (t, float(x), strtof(t)))
        run.count("hard decimal texts", len(chunk))
    for t in INF_TEXTS:
        q = '{"query": [[%s, 0, 0, 0, 0, 0, 0, 0]]}' % t
        st, raw = cl.call("POST", "/v1/layers/" + PREFIX + "specials/forward", q.encode())
        if st != 400:
            run.failures.append("specials: query holding %s (infinite in float32): %d" % (t, st))
            print("FAIL specials: query holding %s: %d" % (t, st))
        run.count("out-of-range texts refused")

    # 3. outputs at the edges: out_proj.weight 0, out_proj.bias special (nonzero) values, so the
    # output is the bias exactly (torch's addmm: bias + 0): every encoding must give its bits
    sd2 = {k: v.detach().clone() for k, v in mod.state_dict().items()}
    for trial in range(4):
        bias = [x for x in special_values(rng, 64) if x != 0][:E]
        sd2["out_proj.weight"] = torch.zeros(E, E)
        sd2["out_proj.bias"] = torch.tensor(bias, dtype=torch.float32)
        members = [(k, enc_tensor(v, "base64", rng)) for k, v in sd2.items()]
        st, raw = cl.call("PUT", "/v1/layers/" + PREFIX + "specials/weights", obj_text(members).encode())
        x = torch.randn(2, 3, E)
        mod.load_state_dict(sd2)
        with torch.enable_grad():
            t_out = mod(x, x, x, need_weights=False)[0].detach()
        outs = []
        for encoding in FORMS:
            body = '{"query": %s, "encoding": "%s"}' % (enc_tensor(x, "base64", rng), encoding)
            st, j, raw = cl.json("POST", "/v1/layers/" + PREFIX + "specials/forward", body.encode())
            if st != 200:
                run.failures.append("specials: forward %d %s" % (st, raw[:200]))
                print("FAIL specials: forward %d %s" % (st, raw[:200]))
                break
            arr, _, _ = dec_reply_tensor(j["output"], None)
            outs.append(arr)
            if arr.tobytes() != t_out.numpy().tobytes():
                run.failures.append("specials: output in %s is not torch's bits: %s vs %s"
                                    % (encoding, arr.reshape(-1)[:E], t_out.reshape(-1)[:E]))
                print("FAIL specials: output in %s is not torch's bits (bias %s)" % (encoding, bias))
        run.count("edge outputs bit-exact")
    cl.call("DELETE", "/v1/layers/" + PREFIX + "specials")


def number_tokens(text):
    import re
    return re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)


def shorter_exists(tok, sig):
    """Whether a decimal with sig-1 significant digits reads back as the same float32 as tok."""
    x = np.float32(strtof(tok))
    for digits in range(1, sig):
        t = "%.*e" % (digits - 1, float(x))
        if f32_bits(strtof(t)) == f32_bits(float(x)):
            return True
    return False


def big_cases(run, rng, count):
    """Bodies past 1 MiB (base64 texts decoded while the body arrives: server/codec/predecode.c), sent
    with Content-Length or chunked, and replies past a million numbers (nested replies written by
    two threads): long query sequences against a few keys, so torch's reference stays cheap."""
    for i in range(count):
        c = Case()
        c.seed = -(i + 1)
        c.rng = rng
        c.H = rng.choice([1, 2, 4])
        c.hd = rng.choice([8, 16])
        c.E = c.H * c.hd
        c.kind = "cross"
        c.kdim, c.vdim = rng.choice([c.E, 5]), rng.choice([c.E, 7])
        c.bias, c.bkv, c.za = True, rng.random() < 0.5, rng.random() < 0.5
        c.bf_field = rng.choice([True, False])
        c.batch_first = c.bf_field
        c.unbatched = False
        c.N = rng.randint(1, 2)
        c.L = (1 << 20) // (c.N * c.E) + rng.randint(1, 300)   # the output: over a million numbers
        c.S0 = rng.randint(1, 6)
        c.extreme, c.medium, c.scale = None, True, 1.0
        c.is_causal = rng.random() < 0.5
        c.nw_field = c.need_weights = False
        c.avg_field, c.average = None, True
        c.kpm_kind, c.mask_kind = "float_inf", "float3"
        c.encodings, c.trace, c.upload, c.st_dtype = ["nested", "base64"], False, "put_json", "F32"
        c.mod = torch.nn.MultiheadAttention(c.E, c.H, bias=True, add_bias_kv=c.bkv, add_zero_attn=c.za,
                                            kdim=c.kdim, vdim=c.vdim, batch_first=c.batch_first)
        c.mod.eval()
        c.sd = {k: v.detach().clone() for k, v in c.mod.state_dict().items()}
        lay = (lambda n, f: (c.N, n, f)) if c.batch_first else (lambda n, f: (n, c.N, f))
        c.query = torch.randn(lay(c.L, c.E))
        c.key = torch.randn(lay(c.S0, c.kdim))
        c.value = torch.randn(lay(c.S0, c.vdim))
        c.kpm = torch.where(torch.rand(c.N, c.S0) < 0.3, torch.tensor(float("-inf")), torch.randn(c.N, c.S0))
        c.attn_mask = torch.randn(c.N * c.H, c.L, c.S0)
        name = PREFIX + "big-%d" % i
        if run.upload(c, name) is not True:
            continue
        t_out = functional(c)[0]
        dead_rows = torch.isneginf(merged_mask(c, torch.float32)).all(-1).any()
        if dead_rows:
            t_out = step_by_step(c, torch.float32)[1]
        for encoding in c.encodings:
            members = [("query", enc_tensor(c.query, "base64", rng)), ("key", enc_tensor(c.key, "base64", rng)),
                       ("value", enc_tensor(c.value, "base64", rng)),
                       ("key_padding_mask", enc_tensor(c.kpm, "base64", rng)),
                       ("attn_mask", enc_tensor(c.attn_mask, "base64", rng)),
                       ("is_causal", json.dumps(c.is_causal)), ("encoding", '"%s"' % encoding)]
            body = obj_text(members).encode()
            chunks = rng if rng.random() < 0.5 else None
            st, j, raw = run.cl.json("POST", "/v1/layers/%s/forward" % name, body, chunks=chunks)
            if st != 200:
                run.fail(c, "big forward (%d bytes): %d %s" % (len(body), st, raw[:300]))
                break
            arr, shape, _ = dec_reply_tensor(j["output"], None)
            v, where = violation(arr, t_out, t_out.double())
            if shape != list(t_out.shape) or v > 0:
                run.fail(c, "big forward (%s, %d-byte body%s): shape %s vs %s, off by %.3g %s"
                         % (encoding, len(body), ", chunked" if chunks else "", shape, list(t_out.shape),
                            v, where))
                break
            run.count("big bodies (%s)" % ("chunked" if chunks else "Content-Length"))
        run.cl.call("DELETE", "/v1/layers/" + name)


def describe(c):
    return ("medium=%s E=%d H=%d kdim=%d vdim=%d bias=%s bkv=%s za=%s batch_first=%s unbatched=%s kind=%s N=%d "
            "L=%d S0=%d kpm=%s mask=%s causal=%s need_weights=%s average=%s extreme=%s upload=%s %s "
            "enc=%s trace=%s" % (c.medium, c.E, c.H, c.kdim, c.vdim, c.bias, c.bkv, c.za, c.bf_field, c.unbatched,
                                 c.kind, c.N, c.L, c.S0, c.kpm_kind, c.mask_kind, c.is_causal,
                                 c.nw_field, c.avg_field, c.extreme, c.upload, c.st_dtype, c.encodings, c.trace))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", type=int, help="run only case number I of the seed")
    ap.add_argument("--url", help="a running attnd (default: start --attnd on a free port)")
    ap.add_argument("--attnd", default=os.path.join(HERE, "..", "..", "build", "attnd"))
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--big", type=int, default=2, help="cases with bodies past 1 MiB (default 2)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    proc = None
    url = args.url
    if not url:
        proc, url = start_daemon(args.attnd)
    try:
        run = Runner(Client(url), args.verbose)
        if args.only is None:
            specials(run, random.Random(args.seed))
            big_cases(run, random.Random(args.seed), args.big)
        idx = [args.only] if args.only is not None else range(args.cases)
        for i in idx:
            c = draw_case(args.seed * 1000003 + i, not args.no_trace)
            if args.verbose:
                print("case %d: %s" % (i, describe(c)), flush=True)
            run.run_case(c)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
            proc.errlog.seek(0)
            log = proc.errlog.read().decode(errors="replace")
            # a sanitizer build (--attnd build-asan/attnd) reports here; SIGTERM must end it with 0
            if proc.returncode != 0 or "Sanitizer" in log or "runtime error" in log:
                print("FAIL attnd exited with %d:\n%s" % (proc.returncode, log[-3000:]))
                run.failures.append("attnd exit")
    print("seed %d: %d cases; %s; %d failures" % (
        args.seed, len(idx), ", ".join("%s %d" % kv for kv in sorted(run.counts.items())),
        len(run.failures)))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
