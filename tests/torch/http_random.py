#!/usr/bin/python3
"""http_random.py - random torch cases end to end over HTTP: attnd's /v1 forward and trace, /v2 infer and
weights_select against torch.

Run with Debian's python3 and torch 1.13 (not part of `make test`, which never needs torch):

    /usr/bin/python3 tests/torch/http_random.py [--cases N] [--seed S] [--url URL] [--attnd PATH] [-v]
        [--no-variants] [--no-select] [--no-v2] [--no-trace] [--big N]

Without --url it starts build/attnd (or --attnd) on a free port of 127.0.0.1 and stops it at the end
(the environment passes through: ATTND_ISA=generic|avx2|avx512 picks the kernel path,
OPENBLAS_CORETYPE OpenBLAS's). Every case is drawn from its own seed (printed on failure: rerun one
with --seed S --only I).

What a case does (urllib only, no client library):
  - a layer with a random config (kdim/vdim != E, bias false, add_bias_kv, add_zero_attn,
    batch_first true/false/left out, H=1, E=1, odd sizes) and, in most cases, the extensions of
    today's models, each drawn on its own: head_dim (E need not divide by H), num_kv_heads
    (grouped-query, multi-query), rope (theta 1.5 ... 1e6), alibi (H a power of two or not), window
    (with and without is_causal), is_causal as the layer's default (the request setting it, either
    way, or leaving it out). Its parameters uploaded as a JSON map in PUT /v1/layers/{name} (every
    tensor in a random form), or as a safetensors file or a JSON map in PUT .../weights; GET
    .../weights must give the same bits back;
  - random inputs in random forms (nested, flat, base64; numbers written in several decimal styles),
    key/value left out or given, key_padding_mask and attn_mask (bool, float, "-inf", 2-D and 3-D),
    is_causal alone or with masks, need_weights / average_attn_weights given or left to their
    defaults, unbatched queries; positions and key_positions ([L] or [N,L], sorted with gaps and
    repeats, shuffled, past 100000, just below 2^24; nested, flat, base64 int64 or int32), decode
    steps (one query at p against the p+1 keys); some cases with extreme magnitudes (scores ~1e4,
    tiny and denormal values), fully masked rows and rows with a single allowed key;
  - the forward reply in a random encoding (sometimes all three, which must agree bit for bit), and
    for a share of cases the trace, every stage compared in the request's layout and its axes (some
    cases asking for a few stages only, some with a weights_select on scores and attn_weights);
  - /v2 infer with the same inputs, JSON or the binary tensor extension (inputs and outputs, the
    outputs asked by binary_data_output or per output): torch's numbers, and /v1's bit for bit;
  - weights_select on /v1 (any encoding) and /v2 (JSON, binary): heads in any order, query and key
    ranges, top_k, pool a x b (mean, max, edge blocks partial), dtype float16 / bfloat16, per head or
    averaged over the chosen heads; checked against torch's numbers (sliced, torch's stable sort,
    float64 block means, torch's .half() / .bfloat16()), and exactly against torch's ops applied to
    attnd's own chosen map (the slice is the full map's, bit for bit; top-k indices and values, the
    block max, the rounding to half precision); the output unchanged by any selection;
  - refusals: a valid case with one shape broken; torch must refuse it (its own shape checks) and
    attnd must answer 400, and the other way round; positions of the wrong length, rank or value
    and selections that break a rule: a 400 naming the field (/v1) or the parameter (/v2).

The reference (README.md, "Coming from torch"): torch's general path, F.multi_head_attention_forward, with the masks merged
as torch 2.x does (the causal and window rules at the request's positions in them; a grouped-query
layer as MHA with its kv heads' rows repeated); where a row has no allowed key (torch: NaN), a
step-by-step torch computation with that row's weights and head output 0, checked against the
functional call on every other row. Torch 1.13 has no RoPE, ALiBi or head_dim != E/H: those cases
come from torch ops written from Hugging Face's code (torch_stages.variant_stages: Llama's
rotate_half and repeat_kv, BLOOM's slopes, Mistral's window), which gen_golden.py checks against
torch's MHA and HF's formulas. The trace stages come from the same step-by-step computation in
float32, checked against float64.
Tolerance: the project's 2e-5 absolute + 1e-4 relative (tests/support/check.h); where torch's own
float32 result is further than that from the float64 one (large magnitudes, huge finite masks,
ALiBi biases past 100 from positions far from the keys'), attnd may be as far from float64 as twice
torch's distance (a few times it, over the tensor, for the ill-conditioned ones); each such case is
printed as a note ("ambiguous float32 references").
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

from torch_stages import alibi_slopes, head_weights, repeated_kv_state_dict, select_slice, variant_stages

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

    def call(self, method, path, body=None, ctype="application/json", accept=None, chunks=None,
             headers=None):
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
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                self.headers = r.headers
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            self.headers = e.headers
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


def enc_positions(p, form, rng):
    """JSON text of positions p (int64) in form nested / flat / base64 (int64) / base64_int32."""
    if form == "nested":
        return json.dumps(p.tolist())
    if form == "flat":
        parts = ['"shape": %s' % json.dumps(list(p.shape)), '"data": %s' % json.dumps(p.reshape(-1).tolist())]
        if rng.random() < 0.5:
            parts.append('"dtype": "%s"' % rng.choice(["int64", "int32"]))
        rng.shuffle(parts)
        return "{" + ", ".join(parts) + "}"
    i32 = form == "base64_int32"
    raw = p.numpy().astype("<i4" if i32 else "<i8").tobytes()
    parts = ['"shape": %s' % json.dumps(list(p.shape)), '"dtype": "%s"' % ("int32" if i32 else "int64"),
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


def halves_to_f32(raw, dtype):
    """Little-endian float16 / bfloat16 bytes -> float32 numpy (exact: every half is a float32)."""
    h = torch.from_numpy(np.frombuffer(raw, dtype="<i2").astype(np.int16).copy())
    return h.view(torch.float16 if dtype == "float16" else torch.bfloat16).float().numpy()


def dec_reply_tensor(v, raw_forms=None, with_dtype=False):
    """A reply tensor (any encoding) -> (float32 numpy array, shape, encoding) (and its dtype with
    with_dtype: "float32", "float16", "bfloat16" or "int32"; nested says none)."""
    if isinstance(v, list) or isinstance(v, (int, float)):
        shape = shape_of_nested(v)
        arr = np.array(v, dtype=np.float64)
        out = arr.astype(np.float32), shape, "nested"
        return out + (None,) if with_dtype else out
    dtype = v.get("dtype", "float32")
    if "base64" in v:
        raw = base64.b64decode(v["base64"])
        if dtype in ("float16", "bfloat16"):
            arr = halves_to_f32(raw, dtype).reshape(v["shape"])
        elif dtype == "int32":
            arr = np.frombuffer(raw, dtype="<i4").astype(np.float32).reshape(v["shape"])
        else:
            assert dtype == "float32", dtype
            arr = np.frombuffer(raw, dtype="<f4").reshape(v["shape"])
        out = arr, list(v["shape"]), "base64"
        return out + (dtype,) if with_dtype else out
    arr = np.array(v["data"], dtype=np.float64).astype(np.float32).reshape(v["shape"])
    out = arr, list(v["shape"]), "flat"
    return out + (dtype,) if with_dtype else out


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
    # the extensions beyond torch (docs/api.md, "The attention of today's models"): off unless drawn
    Hkv = None
    rope = None
    alibi = False
    window = None
    layer_causal = False
    causal_field = None
    pos = None
    kpos = None
    pos_kind = None
    kpos_kind = None
    variants = False
    mod = None
    selections = 0
    ill = False
    large = False
    v2 = None
    bad_selections = 0


def variant_state_dict(c, gen):
    """A layer's parameters on the extensions' shapes (docs/api.md): q rows H*hd, k/v rows Hkv*hd,
    out_proj [E, H*hd]; scaled like draw_case's torch layers (1/sqrt(fan_in), biases 0.5)."""
    Dq, Dkv = c.H * c.hd, c.Hkv * c.hd

    def w(rows, cols):
        return torch.randn((rows, cols), generator=gen) / math.sqrt(cols)

    sd = {}
    if c.kdim == c.E and c.vdim == c.E:
        sd["in_proj_weight"] = w(Dq + 2 * Dkv, c.E)
    else:
        sd["q_proj_weight"] = w(Dq, c.E)
        sd["k_proj_weight"] = w(Dkv, c.kdim)
        sd["v_proj_weight"] = w(Dkv, c.vdim)
    if c.bias:
        sd["in_proj_bias"] = torch.randn(Dq + 2 * Dkv, generator=gen) * 0.5
    if c.bkv:
        sd["bias_k"] = torch.randn((1, 1, Dkv), generator=gen) * 0.5
        sd["bias_v"] = torch.randn((1, 1, Dkv), generator=gen) * 0.5
    sd["out_proj.weight"] = w(c.E, Dq)
    if c.bias:
        sd["out_proj.bias"] = torch.randn(c.E, generator=gen) * 0.5
    return sd


def draw_positions(kind, N, length, gen, unbatched):
    """Positions (int64) of a kind: "seq" sorted with gaps and repeats [length], "batch" one such
    row per batch [N,length], "shuffled" in no order, "large" around 100000, "top" just below
    2^24 (the largest allowed), "decode" filled in by the caller."""
    rows = N if kind == "batch" and not unbatched else 1
    out = torch.zeros((rows, length), dtype=torch.int64)
    for b in range(rows):
        at = int(torch.randint(0, 20, (1,), generator=gen))
        if kind == "large":
            at += 100000
        elif kind == "top":
            at = (1 << 24) - 1 - 2 * length - int(torch.randint(0, 5, (1,), generator=gen))
        for i in range(length):
            out[b, i] = at
            step = int(torch.randint(0, 8, (1,), generator=gen))
            at += 1 if step < 5 else step - 5          # mostly +1, sometimes 0 (repeated) or +2
        if kind == "shuffled":
            out[b] = out[b][torch.randperm(length, generator=gen)]
    return out if rows > 1 else out[0]


def draw_case(seed, want_trace, want_variants=True, want_select=True, want_v2=True):
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
    c.Hkv = c.H
    c.variants = want_variants and rng.random() < 0.6
    if c.variants:
        # head_dim, num_kv_heads, rope, alibi, window, is_causal as the layer's default: each drawn
        # on its own, so that every combination turns up (and torch's layer with none of them)
        c.H = rng.choice([1, 2, 3, 4, 4, 6, 8] if not c.medium else [2, 4, 8])
        c.Hkv = c.H if rng.random() < 0.35 else rng.choice([d for d in range(1, c.H + 1) if c.H % d == 0])
        c.hd = rng.choice([1, 2, 3, 4, 6, 8] if not c.medium else [8, 16, 16, 32, 64])
        c.E = c.H * c.hd if rng.random() < 0.4 else rng.randint(1, 12 if not c.medium else 96)
        if c.hd % 2 == 0 and rng.random() < 0.5:
            c.rope = rng.choice([10000.0, 10000.0, 500000.0, 1000000.0, 100.0, 1.5])
        c.alibi = rng.random() < 0.35
        c.window = rng.choice([None, None, 1, 2, 3, 5] if not c.medium else [None, 1, 8, 40, 100])
        c.layer_causal = rng.random() < 0.25
    c.kind = rng.choice(["self", "self", "self_explicit", "kv", "cross", "cross", "cross"])
    c.pos_kind = None
    if want_variants and rng.random() < 0.45:
        c.pos_kind = rng.choice(["seq", "batch", "shuffled", "large", "top", "decode", "decode"])
    if c.pos_kind == "decode":                           # one query at p against the p+1 keys 0..p
        c.kind = rng.choice(["kv", "cross"])
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
    c.large = c.medium and rng.random() < 0.2      # past several key blocks and row blocks
    if c.large:
        c.L = rng.randint(200, 700)
        c.S0 = c.L if c.kind in ("self", "self_explicit") else rng.randint(200, 900)
    c.decode_p = None
    if c.pos_kind == "decode":
        c.decode_p = rng.randint(0, 12) if not c.medium else rng.randint(0, 300 if not c.large else 1500)
        c.L, c.S0 = 1, c.decode_p + 1
    c.extreme = rng.choice([None] * 8 + ["large", "tiny", "denormal"])
    c.kpm_kind = rng.choice([None, None, "bool", "float", "float_inf", "bool_full", "float_full",
                             "bool_one", "float_huge"])
    c.mask_kind = rng.choice([None, None, "bool2", "float2", "float2_inf", "bool3", "float3",
                              "float3_inf", "bool2_full", "bool3_one", "float2_huge", "float3_huge"])
    # is_causal: the request's (True / False), or left out (None: the layer's default)
    c.causal_field = rng.random() < 0.3
    if c.layer_causal or rng.random() < 0.15:
        c.causal_field = rng.choice([None, None, True, False])
    if not c.variants and c.causal_field is None and rng.random() < 0.5:
        c.causal_field = False
    c.is_causal = c.layer_causal if c.causal_field is None else c.causal_field
    c.nw_field = rng.choice([True, True, False, None])    # None: left out (default false)
    c.need_weights = c.nw_field is True
    c.avg_field = rng.choice([True, False, False, None])  # None: left out (default true)
    c.average = c.avg_field is not False
    c.encodings = rng.choice([["nested"], ["flat"], ["base64"], [None], ["nested", "flat", "base64"]])
    c.trace = rng.random() < (0.15 if c.medium else 0.35) and want_trace and not c.large
    if c.large and c.need_weights:
        c.encodings = [rng.choice(["base64", "flat"])]
    c.upload = rng.choice(["put_json", "put_json", "weights_safetensors", "weights_json"])
    c.st_dtype = "F32"
    if c.upload == "weights_safetensors":
        c.st_dtype = rng.choice(["F32", "F32", "F16", "BF16", "F64"])
    # the other routes: /v2 infer (JSON or binary), weights_select (/v1 and /v2), bad selections
    c.v2 = rng.choice([None, None, "json", "binary"]) if want_v2 else None
    if want_select:
        c.selections = rng.choice([0, 0, 1, 1, 2, 3])
        c.bad_selections = rng.choice([0, 0, 1, 2])

    c.torch_shaped = c.hd * c.H == c.E and c.Hkv == c.H
    if c.torch_shaped:
        mod = torch.nn.MultiheadAttention(c.E, c.H, bias=c.bias, add_bias_kv=c.bkv, add_zero_attn=c.za,
                                          kdim=c.kdim, vdim=c.vdim, batch_first=c.batch_first)
        mod.eval()
        with torch.no_grad():
            for name, p in mod.named_parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if "bias" in name else
                                                               1.0 / math.sqrt(p.shape[-1])))
        c.mod = mod
        c.sd = {k: v.detach().clone() for k, v in mod.state_dict().items()}
    else:
        c.sd = variant_state_dict(c, gen)
        if c.E % c.H == 0:
            # torch's own shape checks for the refusal probes: inputs and masks are shaped by E,
            # kdim, vdim and H alone, whatever head_dim and num_kv_heads say
            c.mod = torch.nn.MultiheadAttention(c.E, c.H, bias=c.bias, add_bias_kv=c.bkv,
                                                add_zero_attn=c.za, kdim=c.kdim, vdim=c.vdim,
                                                batch_first=c.batch_first)
            c.mod.eval()
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
            c.sd = {k: torch.empty(v.shape).copy_(v) for k, v in c.sd.items()}

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

    # positions (queries) and key positions, in any of their forms; left out they are 0..L-1 and
    # the query positions (self-attention) or 0..S-1
    if c.pos_kind == "decode":
        p = c.decode_p
        c.pos = torch.tensor([p], dtype=torch.int64)
        if not c.unbatched and rng.random() < 0.3:
            c.pos = c.pos.expand(N, 1).contiguous()
        if rng.random() < 0.3:          # the keys' positions given too: 0..p
            c.kpos_kind = "seq"
            c.kpos = torch.arange(p + 1, dtype=torch.int64)
    elif c.pos_kind is not None:
        c.pos = draw_positions(c.pos_kind, N, L, gen, c.unbatched)
    if c.pos_kind != "decode" and rng.random() < (0.35 if c.pos is not None else 0.1):
        c.kpos_kind = rng.choice(["seq", "batch", "shuffled", "large"])
        if c.kpos_kind == "large" and c.pos is not None and int(c.pos.min()) >= 100000:
            c.kpos_kind = "seq"
        c.kpos = draw_positions(c.kpos_kind, N, S0, gen, c.unbatched)
        if c.pos is not None and c.pos_kind in ("large", "top") and rng.random() < 0.7:
            # near the queries, so that the rules and RoPE's relative angles matter
            c.kpos = (c.kpos - int(c.kpos.min()) + max(0, int(c.pos.min()) - 3)).clamp(max=(1 << 24) - 1)
    c.pos_form = rng.choice(FORMS + ["base64_int32"])
    c.kpos_form = rng.choice(FORMS + ["base64_int32"])
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
    if c.variants:
        # the extensions, each written when it is not its default (and sometimes when it is)
        if c.hd * c.H != c.E or r.random() < 0.3:
            cfg["head_dim"] = c.hd
        if c.Hkv != c.H or r.random() < 0.3:
            cfg["num_kv_heads"] = c.Hkv
        if c.rope is not None:
            cfg["rope"] = {"theta": c.rope}
        elif r.random() < 0.1:
            cfg["rope"] = None
        if c.alibi or r.random() < 0.2:
            cfg["alibi"] = c.alibi
        if c.window is not None:
            cfg["window"] = c.window
        elif r.random() < 0.1:
            cfg["window"] = None
        if c.layer_causal or r.random() < 0.2:
            cfg["is_causal"] = c.layer_causal
    return cfg


FORMS = ["nested", "flat", "base64"]


def request_text(c, query, key, value, kpm, attn_mask, encoding, omit=(), extra=()):
    """A forward / trace body: the case's members (less those in omit) and extra (name, JSON text)
    pairs, in a random order."""
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
    if c.causal_field is not None:
        members.append(("is_causal", json.dumps(c.causal_field)))
    for name, p, form in (("positions", c.pos, c.pos_form), ("key_positions", c.kpos, c.kpos_form)):
        if p is not None:
            members.append((name, enc_positions(p, form, r)))
        elif r.random() < 0.05:
            members.append((name, "null"))
    if c.nw_field is not None:
        members.append(("need_weights", json.dumps(c.nw_field)))
    if c.avg_field is not None:
        members.append(("average_attn_weights", json.dumps(c.avg_field)))
    if encoding is not None:
        members.append(("encoding", json.dumps(encoding)))
    members = [m for m in members if m[0] not in omit] + list(extra)
    r.shuffle(members)
    return obj_text(members).encode()


# ---------------------------------------------------------------------------------------------------
# torch's numbers

def to_additive(m):
    if m.dtype == torch.bool:
        return torch.zeros(m.shape, dtype=torch.float64).masked_fill(m, float("-inf"))
    return m.to(torch.float64)


def positions_of(c):
    """Query and key positions [N,L], [N,S0] (int64) by docs/api.md's rules: given, else 0..L-1;
    keys given, else the query positions in self-attention (key left out, or the query's shape and
    values), else 0..S0-1."""
    N, L, S0 = c.N, c.L, c.S0

    def expand(p, length):
        if p is None:
            return torch.arange(length, dtype=torch.int64).expand(N, length)
        return p.expand(N, length) if p.dim() == 1 else p

    qpos = expand(c.pos, L)
    if c.kpos is not None:
        kpos = expand(c.kpos, S0)
    elif c.key is None or (c.key.shape == c.query.shape and
                           torch.equal(c.key.view(torch.int32), c.query.view(torch.int32))):
        kpos = qpos
    else:
        kpos = expand(None, S0)
    return qpos, kpos


def rules_allowed(c):
    """[N,L,S0] bool: is_causal (p_j <= p_i) and the window (with is_causal p_i - p_j < W, Mistral's
    sliding window; without it |p_i - p_j| < W); None when neither applies."""
    if not c.is_causal and c.window is None:
        return None
    qpos, kpos = positions_of(c)
    d = qpos[:, :, None] - kpos[:, None, :]
    ok = torch.ones(d.shape, dtype=torch.bool)
    if c.is_causal:
        ok &= d >= 0
    if c.window is not None:
        ok &= (d < c.window) & (-d < c.window)
    return ok


def merged_mask(c, dtype):
    """torch 2.x merge of key_padding_mask + attn_mask + the causal and window rules (at the
    positions): [N*H, L, S0] or None."""
    N, H, L, S0 = c.N, c.H, c.L, c.S0
    total = None
    if c.kpm is not None:
        k = to_additive(c.kpm).reshape(N, 1, 1, S0).expand(N, H, L, S0).reshape(N * H, L, S0)
        total = k
    if c.attn_mask is not None:
        a = to_additive(c.attn_mask)
        a = a.reshape(1, L, S0).expand(N * H, L, S0) if a.dim() == 2 else a.reshape(N * H, L, S0)
        total = a if total is None else total + a
    ok = rules_allowed(c)
    if ok is not None:
        cm = to_additive(~ok).reshape(N, 1, L, S0).expand(N, H, L, S0).reshape(N * H, L, S0)
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
    stages in [N,H,...] order (k_heads and v_heads [N,Hkv,S,D], axes NKSD, with fewer kv heads);
    no N for an unbatched query. Returns the tensor and its axes."""
    axes = {"q_proj": "NLE", "k_proj": "NSE", "v_proj": "NSE", "q_heads": "NHLD", "k_heads": "NHSD",
            "v_heads": "NHSD", "scores": "NHLS", "attn_weights": "NHLS", "head_outputs": "NHLD",
            "concat": "NLE", "output": "NLE"}[name]
    if name in ("k_heads", "v_heads") and c.Hkv != c.H:
        axes = "NKSD"
    if name == "attn_weights" and c.average:
        t, axes = t.mean(dim=1), "NLS"
    if c.unbatched:
        t, axes = t.squeeze(0), axes[1:]
    elif not c.batch_first and name in ("q_proj", "k_proj", "v_proj", "concat", "output"):
        t, axes = t.transpose(0, 1), axes[1] + axes[0] + axes[2]
    return t.contiguous(), list(axes)


def torch_math(c):
    """Whether torch's own MHA computes the case: no RoPE, no ALiBi, head_dim E/H (a grouped-query
    layer as MHA with its kv heads' rows repeated; the rules are in the merged mask)."""
    return c.rope is None and not c.alibi and c.hd * c.H == c.E


ILL_BIAS = 100


def ill_conditioned(c):
    """Whether float32 cannot settle the scores: ALiBi biases past ILL_BIAS on keys a row may see
    (positions far from the keys'), where an ulp of the bias is past the tolerance's share and the
    order of the additions decides the weights. attnd is then held as for large inputs."""
    if not c.alibi:
        return False
    qpos, kpos = positions_of(c)
    dist = (kpos[:, None, :] - qpos[:, :, None]).abs().double()          # [N,L,S0]
    bias = alibi_slopes(c.H).double().max() * dist
    mask = merged_mask(c, torch.float64)
    if mask is not None:
        seen = torch.isfinite(mask.reshape(c.N, c.H, c.L, c.S0)).any(dim=1)
        bias = torch.where(seen, bias, torch.zeros((), dtype=torch.float64))
    return float(bias.max()) > ILL_BIAS if bias.numel() else False


def step_by_step(c, dtype):
    """Every stage in torch 1.13's order, with the extensions in torch ops written from HF's
    conventions (torch_stages.variant_stages; with none of them it is attention_stages' order);
    dead rows weights 0. Returns (stages (batch-major), output (API layout), the weights forward
    answers (or None), dead [N*H,L], per-head weights [N,H,L,S])."""
    sd = {k: v.to(dtype) for k, v in c.sd.items()}
    q_in = seq_first(c, c.query).to(dtype)
    k_in = q_in if c.key is None else seq_first(c, c.key).to(dtype)
    v_in = k_in if c.value is None else seq_first(c, c.value).to(dtype)
    qpos, kpos = positions_of(c)
    st, out, w, dead = variant_stages(q_in, k_in, v_in, sd, c.H, c.Hkv, c.hd, merged_mask(c, dtype),
                                      c.bkv, c.za, dtype, rope_theta=c.rope, alibi=c.alibi,
                                      qpos=qpos, kpos=kpos)
    weights = None
    if c.need_weights:
        weights = head_weights(w, c.N, c.H, c.average)
        if c.unbatched:
            weights = weights.squeeze(0)
    return st, from_seq_first(c, out), weights, dead, st["attn_weights"]


def functional(c, need_weights=None, average=None):
    """F.multi_head_attention_forward (torch's general path), grad enabled, merged float mask (the
    causal and window rules at the case's positions in it); a grouped-query layer as MHA with its
    kv heads repeated. Only where torch_math(c)."""
    need_weights = c.need_weights if need_weights is None else need_weights
    average = c.average if average is None else average
    sd = c.sd if c.Hkv == c.H else repeated_kv_state_dict(c.H, c.Hkv, c.hd, c.sd)
    q = seq_first(c, c.query)
    k = q if c.key is None else seq_first(c, c.key)
    v = k if c.value is None else seq_first(c, c.value)
    packed = "in_proj_weight" in sd
    with torch.enable_grad():
        out, w = F.multi_head_attention_forward(
            q, k, v, c.E, c.H, sd.get("in_proj_weight"), sd.get("in_proj_bias"), sd.get("bias_k"),
            sd.get("bias_v"), c.za, 0.0, sd["out_proj.weight"], sd.get("out_proj.bias"),
            training=False, key_padding_mask=None, need_weights=need_weights,
            attn_mask=merged_mask(c, torch.float32), use_separate_proj_weight=not packed,
            q_proj_weight=sd.get("q_proj_weight"), k_proj_weight=sd.get("k_proj_weight"),
            v_proj_weight=sd.get("v_proj_weight"), average_attn_weights=average)
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

def violation(got, t32, t64, atol=ATOL, large=False, slack=0.0):
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
    if slack:   # values rounded to a half-precision dtype: half an ulp of it more (relative)
        atol = atol + slack * np.maximum(np.abs(a), np.abs(e))
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
# Choosing which weights come back (weights_select, docs/api.md): torch's numbers for a selection

def loose_of(c, x32, x64):
    """For ill-conditioned cases (large inputs, far ALiBi distances): 4x torch's own largest
    distance from float64 over the tensor, the slack violation() gives them."""
    if not (c.extreme == "large" or c.ill):
        return 0.0
    d = (x32.double() - x64.double()).abs()
    d = d[torch.isfinite(d)]
    return 4 * float(d.max()) if d.numel() else 0.0


def draw_selection(rng, H, L, S):
    """A valid weights_select over H heads, L queries, S keys (the appended keys counted)."""
    sel = {}
    if rng.random() < 0.6:
        heads = list(range(H))
        rng.shuffle(heads)
        sel["heads"] = heads[:rng.randint(1, H)]
    for member, n in (("queries", L), ("keys", S)):
        if rng.random() < 0.55:
            a = rng.randrange(n)
            sel[member] = [a, rng.randrange(a + 1, n + 1)]
    Lq = sel["queries"][1] - sel["queries"][0] if "queries" in sel else L
    Sk = sel["keys"][1] - sel["keys"][0] if "keys" in sel else S
    kind = rng.choice(["map", "map", "top_k", "top_k", "pool", "pool"])
    if kind == "top_k":
        sel["top_k"] = rng.choice([1, 1, 2, 3, 5, Sk, Sk + 3, rng.randint(1, Sk)])
    elif kind == "pool":
        sel["pool"] = [rng.choice([1, 2, 3, rng.randint(1, Lq + 1)]), rng.choice([1, 2, 3, 4, rng.randint(1, Sk + 1)])]
        op = rng.choice([None, "mean", "max", "max"])
        if op:
            sel["pool_op"] = op
    r = rng.random()
    if r < 0.25:
        sel["dtype"] = "float16"
    elif r < 0.45:
        sel["dtype"] = "bfloat16"
    elif r < 0.55:
        sel["dtype"] = "float32"
    return sel


def sel_reduce(x, sel):
    """x [..., L', S'] -> (values, indices or None): the map, torch's stable descending sort's
    first k (ties to the lower key index; indices absolute), or the pooled blocks (mean in float64,
    max) with partial edge blocks."""
    if "top_k" in sel:
        k = min(sel["top_k"], x.shape[-1])
        vals, idx = torch.sort(x, dim=-1, descending=True, stable=True)
        return vals[..., :k].contiguous(), idx[..., :k] + sel.get("keys", [0])[0]
    if "pool" in sel:
        a, b = sel["pool"]
        Lq, Sk = x.shape[-2], x.shape[-1]
        Lp, Sp = (Lq + a - 1) // a, (Sk + b - 1) // b
        lead = tuple(x.shape[:-2])
        pad = (0, Sp * b - Sk, 0, Lp * a - Lq)
        xd = x.to(torch.float64)
        if sel.get("pool_op") == "max":
            xp = F.pad(xd, pad, value=float("-inf")).reshape(lead + (Lp, a, Sp, b))
            out = xp.amax(dim=(-3, -1))
        else:      # the mean over the cells a block holds (edge blocks partial), in float64
            xp = F.pad(xd, pad, value=0.0).reshape(lead + (Lp, a, Sp, b))
            ones = F.pad(torch.ones(xd.shape, dtype=torch.float64), pad, value=0.0).reshape(xp.shape)
            out = xp.sum(dim=(-3, -1)) / ones.sum(dim=(-3, -1))
        return out.to(x.dtype).contiguous(), None
    return x, None


def round_dtype(x, dtype):
    """torch's .half() / .bfloat16() of float32 numbers, back in float32 (numpy)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if dtype == "float16":
        t = t.half()
    elif dtype == "bfloat16":
        t = t.bfloat16()
    return t.float().numpy()


def v2_selection_params(sel):
    """The same selection as /v2's flat request parameters."""
    p = {}
    if "heads" in sel:
        p["weights_heads"] = ",".join(str(h) for h in sel["heads"])
    for m in ("queries", "keys"):
        if m in sel:
            p["weights_" + m] = "%d:%d" % tuple(sel[m])
    if "top_k" in sel:
        p["weights_top_k"] = sel["top_k"]
    if "pool" in sel:
        p["weights_pool"] = "%dx%d" % tuple(sel["pool"])
    if "pool_op" in sel:
        p["weights_pool_op"] = sel["pool_op"]
    if "dtype" in sel:
        p["weights_datatype"] = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}[sel["dtype"]]
    return p


def bad_selections(rng, H, L, S):
    """(selection, member) pairs that break one rule of docs/api.md each: a head outside 0..H-1 or
    given twice, empty heads, a range outside its axis or empty, top_k < 1, a pool size < 1, pool
    with top_k, an unknown pool_op, dtype or member."""
    out = [({"heads": [H]}, "heads"), ({"heads": [rng.randrange(H), -1]}, "heads"),
           ({"heads": [0, 0] if H == 1 else [1, 0, 1]}, "heads"), ({"heads": []}, "heads"),
           ({"queries": [0, L + 1]}, "queries"), ({"queries": [L, L]}, "queries"),
           ({"queries": [rng.randrange(L), 0] if L > 1 else [1, 0]}, "queries"),
           ({"queries": [-1, 1]}, "queries"),
           ({"keys": [0, S + rng.randint(1, 3)]}, "keys"), ({"keys": [S - 1, S - 1]}, "keys"),
           ({"keys": [S, S + 1]}, "keys"),
           ({"top_k": 0}, "top_k"), ({"top_k": -rng.randint(1, 5)}, "top_k"),
           ({"pool": [0, 1]}, "pool"), ({"pool": [1, 0]}, "pool"), ({"pool": [-2, 2]}, "pool"),
           ({"pool": [1, 1], "top_k": 1}, "pool"),
           ({"pool": [2, 2], "pool_op": "sum"}, "pool_op"),
           ({"dtype": rng.choice(["float64", "half", "int8", "FP16"])}, "dtype")]
    sel, member = rng.choice(out)
    sel = dict(sel)
    # with valid members around it
    if member != "heads" and rng.random() < 0.5:
        sel["heads"] = [rng.randrange(H)]
    if member not in ("top_k", "pool", "pool_op") and rng.random() < 0.3:
        sel["top_k"] = 1
    return sel, member


# ---------------------------------------------------------------------------------------------------
# /v2 (KServe v2 / Triton): bodies and replies

V2_TYPES = {"output": "FP32", "attn_weights": "FP32"}


def v2_tensor_json(name, t, datatype, rng):
    """One input of an infer request with its data in JSON, flat or nested as the shape says."""
    members = ['"name": "%s"' % name, '"datatype": "%s"' % datatype,
               '"shape": %s' % json.dumps(list(t.shape))]
    nested = rng.random() < 0.4
    if datatype in ("INT64", "INT32"):
        data = json.dumps(t.tolist() if nested else t.reshape(-1).tolist())
    else:
        data = nested_text(t if nested else t.reshape(-1), rng, True)
    members.append('"data": ' + data)
    rng.shuffle(members)
    return "{" + ", ".join(members) + "}"


def v2_tensor_bytes(t, datatype):
    if datatype == "BOOL":
        return t.numpy().astype(np.uint8).tobytes()
    if datatype == "INT64":
        return t.numpy().astype("<i8").tobytes()
    if datatype == "INT32":
        return t.numpy().astype("<i4").tobytes()
    return t.numpy().astype("<f4").tobytes()


def v2_body(c, params, binary, outputs=None, query=None):
    """An infer body for case c: (bytes, header length or None). binary: inputs as the binary
    tensor extension (each input binary or JSON at random); params: the request's parameters."""
    r = c.rng
    ins = [("query", c.query if query is None else query, "FP32")]
    if c.key is not None:
        ins.append(("key", c.key, "FP32"))
    if c.value is not None:
        ins.append(("value", c.value, "FP32"))
    for name, m in (("key_padding_mask", c.kpm), ("attn_mask", c.attn_mask)):
        if m is not None:
            ins.append((name, m, "BOOL" if m.dtype == torch.bool else "FP32"))
    for name, p in (("positions", c.pos), ("key_positions", c.kpos)):
        if p is not None:
            ins.append((name, p, r.choice(["INT64", "INT32"])))
    r.shuffle(ins)
    texts, blobs = [], []
    for name, t, dt in ins:
        if binary and r.random() < 0.85:
            raw = v2_tensor_bytes(t, dt)
            blobs.append(raw)
            texts.append('{"name": "%s", "datatype": "%s", "shape": %s, "parameters": '
                         '{"binary_data_size": %d}}' % (name, dt, json.dumps(list(t.shape)), len(raw)))
        else:
            texts.append(v2_tensor_json(name, t, dt, r))
    members = ['"inputs": [' + ", ".join(texts) + "]"]
    if params or r.random() < 0.5:
        members.append('"parameters": ' + json.dumps(params))
    if outputs is not None:
        members.append('"outputs": ' + json.dumps(outputs))
    if r.random() < 0.5:
        members.append('"id": "case-%d"' % c.seed)
    r.shuffle(members)
    head = ("{" + ", ".join(members) + "}").encode()
    if not blobs:
        return head, None
    return head + b"".join(blobs), len(head)


def v2_reply(status, raw, headers):
    """An infer reply -> {name: (float32 numpy, shape, datatype)}; raises ValueError if malformed."""
    hl = headers.get("Inference-Header-Content-Length") if headers else None
    head = raw if hl is None else raw[:int(hl)]
    j = json.loads(head, parse_float=strtof, parse_int=read_int)
    off = len(head)
    out = {}
    for o in j["outputs"]:
        dt, shape = o["datatype"], list(o["shape"])
        count = int(np.prod(shape)) if shape else 1
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is None:
            arr = np.array(o["data"], dtype=np.float64).astype(np.float32).reshape(shape)
        else:
            es = {"FP32": 4, "INT32": 4, "FP16": 2, "BF16": 2}[dt]
            if size != count * es:
                raise ValueError("%s: binary_data_size %d for %d elements of %s" % (o["name"], size, count, dt))
            blob = raw[off:off + size]
            off += size
            if dt == "FP32":
                arr = np.frombuffer(blob, dtype="<f4").reshape(shape)
            elif dt == "INT32":
                arr = np.frombuffer(blob, dtype="<i4").astype(np.float32).reshape(shape)
            else:
                arr = halves_to_f32(blob, "float16" if dt == "FP16" else "bfloat16").reshape(shape)
        out[o["name"]] = (arr, shape, dt)
    if off != len(raw):
        raise ValueError("%d bytes after the binary outputs" % (len(raw) - off))
    return out, j


def case_id(c):
    return ("--seed %d --only %d" % divmod(c.seed, 1000003)) if c.seed >= 0 else "big case %d" % -c.seed


def area_tags(c):
    """What a case covered, for the run's summary."""
    t = []
    if c.hd * c.H != c.E:
        t.append("head_dim != E/H")
    if c.Hkv != c.H:
        t.append("MQA" if c.Hkv == 1 else "GQA")
    if c.rope is not None:
        t.append("rope")
    if c.alibi:
        t.append("alibi (H a power of two)" if c.H & (c.H - 1) == 0 else "alibi (H not a power of two)")
    if c.window is not None:
        t.append("window with is_causal" if c.is_causal else "window without is_causal")
    if c.causal_field is None and c.layer_causal:
        t.append("is_causal from the layer")
    if c.is_causal:
        t.append("is_causal")
    if c.pos is not None:
        t.append("decode step" if c.pos_kind == "decode" else
                 "positions [N,L]" if c.pos.dim() == 2 else "positions [L]")
        if c.pos_kind in ("large", "top"):
            t.append("positions past 100000")
    if c.kpos is not None:
        t.append("key_positions [N,S]" if c.kpos.dim() == 2 else "key_positions [S]")
    if c.kdim != c.E or c.vdim != c.E:
        t.append("kdim/vdim")
    if not c.bias:
        t.append("bias off")
    if c.bkv:
        t.append("add_bias_kv")
    if c.za:
        t.append("add_zero_attn")
    if c.kpm is not None:
        t.append("key_padding_mask " + ("bool" if c.kpm.dtype == torch.bool else "float"))
    if c.attn_mask is not None:
        t.append("attn_mask %s %d-D" % ("bool" if c.attn_mask.dtype == torch.bool else "float",
                                         c.attn_mask.dim()))
    if getattr(c, "refs", None) and c.refs["dead"]:
        t.append("fully masked rows")
    if c.unbatched:
        t.append("unbatched")
    elif not c.batch_first:
        t.append("batch_first false")
    if c.need_weights:
        t.append("weights averaged" if c.average else "weights per head")
    if c.trace:
        t.append("trace")
    for e in c.encodings:
        t.append("encoding " + (e or "default"))
    if c.v2:
        t.append("/v2 " + c.v2)
    if c.selections:
        t.append("weights_select")
    if c.bad_selections:
        t.append("bad selections")
    if c.extreme:
        t.append("extreme " + c.extreme)
    if c.large:
        t.append("large sizes (L, S 200-900)")
    elif c.medium:
        t.append("medium sizes")
    if c.variants and not (c.hd * c.H != c.E or c.Hkv != c.H or c.rope or c.alibi or c.window or c.layer_causal):
        t.append("variant fields at their defaults")
    return t


def selection_tags(sel, average):
    t = ["averaged over the chosen heads" if average else "per head"]
    if "heads" in sel:
        t.append("heads chosen")
    if "queries" in sel or "keys" in sel:
        t.append("ranges")
    if "top_k" in sel:
        t.append("top_k")
    elif "pool" in sel:
        t.append("pool " + sel.get("pool_op", "mean"))
    else:
        t.append("map")
    t.append(sel.get("dtype", "float32"))
    return t


# ---------------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, client, verbose):
        self.cl = client
        self.verbose = verbose
        self.failures = []
        self.counts = {}
        self.ambiguous = []

    def count(self, what, n=1):
        self.counts[what] = self.counts.get(what, 0) + n

    def fail(self, c, what):
        msg = "%s: %s" % (case_id(c), what)
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
        nfail = len(self.failures)
        try:
            refs = self.references(c)
            if refs is None:
                return
            c.refs = refs
            self.forward(c, name)
            if c.trace:
                self.trace(c, name)
            if c.v2:
                self.v2(c, name)
            for i in range(c.selections):
                self.select(c, name, i)
            for i in range(c.bad_selections):
                self.bad_select(c, name)
            self.refusal(c, name)
        finally:
            self.cl.call("DELETE", "/v1/layers/" + name)
        if len(self.failures) == nfail:
            for tag in area_tags(c):
                self.count("cases: " + tag)

    def references(self, c):
        """torch's numbers for the case: the step-by-step computation in float32 and float64 (the
        extensions in torch ops from HF's conventions), and where torch's own MHA computes the case,
        F.multi_head_attention_forward, which is then the reference (and the step-by-step one is
        checked against it)."""
        st32, out_s, w_s, dead, wh32 = step_by_step(c, torch.float32)
        st64, out64, w64, _, wh64 = step_by_step(c, torch.float64)
        any_dead = bool(dead.any())
        ref_out, ref_w, ref_wh = out_s, w_s, wh32
        c.ill = ill_conditioned(c)
        large = c.extreme == "large" or c.ill
        if torch_math(c):
            f_out, f_w = functional(c)
            _, f_wh = functional(c, True, False)
            if c.unbatched:
                f_wh = f_wh.unsqueeze(0)
            if not any_dead:
                ref_out, ref_w, ref_wh = f_out, f_w, f_wh
                # the step-by-step computation agrees with torch's (its trace reference is sound)
                if violation(out_s.numpy(), f_out, out64, ATOL, large)[0] > 0:
                    return self.fail(c, "reference: step-by-step output differs from functional")
                if violation(wh32.numpy(), f_wh, wh64, ATOL, large)[0] > 0:
                    return self.fail(c, "reference: step-by-step weights differ from functional")
            self.count("references: torch's own MHA" + (" (GQA as MHA)" if c.Hkv != c.H else ""))
        else:
            self.count("references: torch ops from HF's conventions")
        # torch's own float32 result where float32 cannot settle the answer: further from float64
        # than the tolerance (attnd is then held to float64 with twice torch's distance)
        atol = ATOL * c.scale if c.extreme == "tiny" and not c.bias else ATOL
        for what, a, e, tol in (("output", ref_out, out64, atol), ("weights", ref_wh, wh64, ATOL)):
            d = (a.double() - e).abs() - (tol + RTOL * e.abs())
            d = d[torch.isfinite(d)]
            if d.numel() and float(d.max()) > 0:
                self.count("ambiguous float32 references (%s)" % what)
                if len(self.ambiguous) < 50:
                    why = ("inputs of magnitude %g" % c.scale if c.extreme == "large" else
                           "ALiBi distances past %d" % ILL_BIAS if c.ill else
                           "float masks of %s" % sorted({c.kpm_kind, c.mask_kind} - {None})
                           if "huge" in "%s%s" % (c.kpm_kind, c.mask_kind) else "?")
                    self.ambiguous.append("%s: torch's float32 %s is %.3g past the tolerance from "
                                          "float64 (%s)" % (case_id(c), what, float(d.max()), why))
        return dict(st32=st32, st64=st64, out=ref_out, out64=out64, w=ref_w, w64=w64, wh=ref_wh,
                    wh64=wh64, dead=any_dead)

    def check_tensor(self, c, what, arr, shape, ref, ref64, atol=None):
        """One reply tensor against torch's: shape, then the tolerance. Returns True when it holds."""
        if shape != list(ref.shape):
            self.fail(c, "%s shape %s, torch %s" % (what, shape, list(ref.shape)))
            return False
        if atol is None:
            atol = ATOL * c.scale if c.extreme == "tiny" and not c.bias else ATOL
        v, where = violation(arr, ref, ref64, atol, c.extreme == "large" or c.ill)
        if v > 0:
            self.fail(c, "%s off by %.3g: %s" % (what, v, where))
            return False
        self.count("tensors compared")
        return True

    def forward(self, c, name):
        R = c.refs
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
            for key, ref, ref64 in (("output", R["out"], R["out64"]), ("attn_weights", R["w"], R["w64"])):
                if key not in j:
                    continue
                arr, shape, got_enc = dec_reply_tensor(j[key], None)
                if got_enc != enc:
                    return self.fail(c, "%s in encoding %s, asked %s" % (key, got_enc, enc))
                if not self.check_tensor(c, "%s (%s)" % (key, enc), arr, shape, ref, ref64,
                                         ATOL if key == "attn_weights" else None):
                    return
                replies.setdefault(key, []).append(arr)
        for key, arrs in replies.items():
            for a in arrs[1:]:
                if a.tobytes() != arrs[0].tobytes():
                    return self.fail(c, "%s differs between encodings %s" % (key, c.encodings))
        c.v1_replies = {k: v[0] for k, v in replies.items()}
        if len(c.encodings) > 1:
            self.count("encoding triples bit-identical")

    def trace(self, c, name):
        R = c.refs
        st32, st64 = R["st32"], R["st64"]
        enc = c.rng.choice(FORMS + [None])
        extra = []
        want = STAGES
        if c.rng.random() < 0.4:  # some stages only, asked in any order (some twice)
            want = [n for n in STAGES if c.rng.random() < 0.5] or ["scores"]
            asked = list(want) + ([c.rng.choice(want)] if c.rng.random() < 0.2 else [])
            c.rng.shuffle(asked)
            extra.append(("stages", json.dumps(asked)))
            self.count("traces with a few stages")
        sel = None
        if c.selections and c.rng.random() < 0.5 and any(n in want for n in ("scores", "attn_weights")):
            # the scores and attn_weights stages under a selection
            sel = draw_selection(c.rng, c.H, c.L, R["wh"].shape[-1])
            extra.append(("weights_select", json.dumps(sel)))
        body = request_text(c, c.query, c.key, c.value, c.kpm, c.attn_mask, enc, extra=extra)
        st, j, raw = self.cl.json("POST", "/v1/layers/%s/trace" % name, body)
        if st != 200:
            return self.fail(c, "trace%s: %d %s" % (" with %s" % json.dumps(sel) if sel else "", st, raw[:400]))
        names = [s["name"] for s in j["stages"]]
        if names != want:
            return self.fail(c, "trace stages %s, asked %s" % (names, want))
        for s in j["stages"]:
            if sel is not None and s["name"] in ("scores", "attn_weights"):
                if not self.trace_selected(c, s, sel):
                    return
                continue
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
            v, where = violation(arr, ref, ref64, atol, c.extreme == "large" or c.ill)
            if v > 0:
                return self.fail(c, "trace %s off by %.3g: %s" % (s["name"], v, where))
        self.count("traces compared")
        if sel is not None:
            self.count("traces with weights_select")

    def trace_selected(self, c, s, sel):
        """A scores or attn_weights stage under a selection: torch's stage, chosen and reduced
        (scores always per head), within the tolerance; with top_k "indices" beside the values."""
        R = c.refs
        stage = s["name"]
        average = c.average and stage == "attn_weights"
        full32 = R["st32"]["scores"] if stage == "scores" else R["wh"]
        full64 = R["st64"]["scores"] if stage == "scores" else R["wh64"]
        x32, x64 = select_slice(full32, sel, average), select_slice(full64, sel, average)
        if c.unbatched:
            x32, x64 = x32.squeeze(0), x64.squeeze(0)
        v32, i32 = sel_reduce(x32, sel)
        v64, _ = sel_reduce(x64, sel)
        axes = ("NLS" if average else "NHLS")[(1 if c.unbatched else 0):]
        if "top_k" in sel:
            axes = axes[:-1] + "T"
        what = "trace %s with %s" % (stage, json.dumps(sel))
        if s.get("axes") != list(axes):
            self.fail(c, "%s: axes %s, want %s" % (what, s.get("axes"), list(axes)))
            return False
        arr, shape, _, dt = dec_reply_tensor(s["tensor"], None, True)
        atol = ATOL
        if stage == "scores" and c.extreme == "tiny" and not c.bias:
            atol = ATOL * c.scale * c.scale
        dtype = sel.get("dtype", "float32")
        if dtype != "float32":
            # the stage rounded as torch rounds: compare with torch's numbers rounded the same way,
            # within the tolerance plus half an ulp of the dtype
            v32r = torch.from_numpy(round_dtype(v32.numpy(), dtype))
            slack = 2.0 ** -11 if dtype == "float16" else 2.0 ** -8
            return self.check_rounded(c, what, arr, shape, v32r, v64, atol, slack) and \
                self.check_indices(c, what, s, i32, x32, arr, sel, atol + loose_of(c, x32, x64))
        if not self.check_tensor(c, what, arr, shape, v32, v64, atol):
            return False
        return self.check_indices(c, what, s, i32, x32, arr, sel, atol + loose_of(c, x32, x64))

    def check_rounded(self, c, what, arr, shape, ref_rounded, ref64, atol, slack):
        """Half-precision numbers against torch's rounded the same way: the tolerance plus half an
        ulp of the dtype (slack, relative); infinities (past float16's range) where torch's are."""
        if shape != list(ref_rounded.shape):
            self.fail(c, "%s: shape %s, torch %s" % (what, shape, list(ref_rounded.shape)))
            return False
        v, where = violation(arr, ref_rounded, ref64, atol, c.extreme == "large" or c.ill, slack)
        if v > 0:
            self.fail(c, "%s off by %.3g: %s" % (what, v, where))
            return False
        self.count("tensors compared")
        return True

    def check_indices(self, c, what, s, i_ref, x32, values, sel, atol):
        """Top-k indices: int32 key indices in the chosen range, distinct per row, each pointing at
        a key whose torch weight is the value answered (within the tolerance: near-ties may come
        either way), and exact ties (masked keys' zeros, -inf scores) to the lower key index."""
        if "top_k" not in sel:
            if "indices" in s:
                self.fail(c, "%s: indices without top_k" % what)
                return False
            return True
        if "indices" not in s:
            self.fail(c, "%s: no indices" % what)
            return False
        idx, shape, _, dt = dec_reply_tensor(s["indices"], None, True)
        if shape != list(i_ref.shape) or (dt is not None and dt != "int32"):
            self.fail(c, "%s: indices shape %s (%s), torch %s" % (what, shape, dt, list(i_ref.shape)))
            return False
        return self.check_topk_rows(c, what, idx, values, x32, sel, atol)

    def check_topk_rows(self, c, what, idx, values, x32, sel, atol):
        dtype = sel.get("dtype") or "float32"
        k0, k1 = sel.get("keys", [0, x32.shape[-1]])
        idx = np.asarray(idx, dtype=np.int64)
        vals = np.asarray(values, dtype=np.float64)
        ref = x32.double().numpy()
        kk = idx.shape[-1]
        rows_i = idx.reshape(-1, kk)
        rows_v = vals.reshape(-1, kk)
        rows_r = ref.reshape(-1, ref.shape[-1])
        for r in range(rows_i.shape[0]):
            ii, vv, rr = rows_i[r], rows_v[r], rows_r[r]
            if (ii < k0).any() or (ii >= k1).any() or len(set(ii.tolist())) != kk:
                self.fail(c, "%s: row %d indices %s (keys %d..%d)" % (what, r, ii.tolist(), k0, k1))
                return False
            tv = rr[ii - k0]
            tvr = round_dtype(tv, dtype).astype(np.float64) if dtype != "float32" else tv
            fin = np.isfinite(tvr)
            if not np.array_equal(np.isinf(vv), ~fin) or not np.array_equal(vv[~fin], tvr[~fin]) or (
                    np.abs(vv[fin] - tv[fin]) > atol + RTOL * np.abs(tv[fin]) + 2 ** -8 * np.abs(tv[fin])).any():
                self.fail(c, "%s: row %d: indices %s hold torch's %s, answered %s"
                          % (what, r, ii.tolist(), tv.tolist(), vv.tolist()))
                return False
            for a in range(kk - 1):  # equal values: the lower key first
                if vv[a] == vv[a + 1] and rr[ii[a] - k0] == rr[ii[a + 1] - k0] and ii[a] > ii[a + 1]:
                    self.fail(c, "%s: row %d: tie %s at keys %d, %d in that order"
                              % (what, r, vv[a], ii[a], ii[a + 1]))
                    return False
            # the k largest: no key left out is (in torch's numbers) clearly above the smallest kept
            left = np.setdiff1d(np.arange(k0, k1), ii)
            if left.size:
                out_max = rr[left - k0].max()
                kept_min = tv.min()
                if (np.isinf(kept_min) and kept_min < 0 and out_max > kept_min) or (
                        np.isfinite(kept_min) and out_max > kept_min + atol + RTOL * abs(kept_min) +
                        2 ** -8 * abs(kept_min)):
                    self.fail(c, "%s: row %d: key %d (torch %.9g) left out, %.9g kept"
                              % (what, r, int(left[np.argmax(rr[left - k0])]), out_max, kept_min))
                    return False
                if out_max == kept_min and (np.isinf(out_max) or out_max == 0):
                    # exact ties among masked keys: the lower indices kept
                    tied_out = left[rr[left - k0] == out_max]
                    tied_in = ii[tv == kept_min]
                    if tied_out.min() < tied_in.max():
                        self.fail(c, "%s: row %d: tie at %s: key %d kept, key %d left out"
                                  % (what, r, out_max, int(tied_in.max()), int(tied_out.min())))
                        return False
        self.count("top-k rows checked")
        return True

    def v2(self, c, name):
        """The case through /v2 infer (JSON, or the binary tensor extension for inputs and
        outputs): torch's numbers, and /v1's bit for bit."""
        R = c.refs
        r = c.rng
        binary = c.v2 == "binary"
        params = {}
        if c.causal_field is not None:
            params["is_causal"] = c.causal_field
        if c.nw_field is not None:
            params["need_weights"] = c.nw_field
        if c.avg_field is not None:
            params["average_attn_weights"] = c.avg_field
        bin_out = binary and r.random() < 0.7
        outputs = None
        want_w = c.need_weights
        if bin_out and r.random() < 0.5:
            params["binary_data_output"] = True
        elif r.random() < 0.3:
            # outputs listed (binary per output); listing attn_weights asks for it
            want_w = c.need_weights or (c.nw_field is None and r.random() < 0.5)
            outputs = [{"name": "attn_weights"}] if want_w else []
            if not outputs or r.random() < 0.8:   # the output too, or only the weights
                outputs.append({"name": "output"})
            for o in outputs:
                if bin_out and r.random() < 0.75:
                    o["parameters"] = {"binary_data": True}
                elif r.random() < 0.2:
                    o["parameters"] = {"binary_data": False}
            r.shuffle(outputs)
        elif bin_out:
            params["binary_data_output"] = True
        body, hl = v2_body(c, params, binary, outputs)
        headers = {"Inference-Header-Content-Length": str(hl)} if hl is not None else None
        st, raw = self.cl.call("POST", "/v2/models/%s/infer" % name, body,
                               ctype="application/octet-stream" if hl is not None else "application/json",
                               headers=headers)
        if st != 200:
            return self.fail(c, "/v2 %s: %d %s" % (c.v2, st, raw[:400]))
        try:
            got, j = v2_reply(st, raw, self.cl.headers)
        except (ValueError, KeyError, TypeError) as e:
            return self.fail(c, "/v2 %s: reply %s: %s" % (c.v2, e, raw[:300]))
        want = {"output"} | ({"attn_weights"} if want_w else set())
        if outputs is not None:
            want = {o["name"] for o in outputs}
        if set(got) != want:
            return self.fail(c, "/v2 outputs %s, want %s" % (sorted(got), sorted(want)))
        w_ref, w_ref64 = R["w"], R["w64"]
        if want_w and not c.need_weights:   # asked through outputs: per the request's average
            w_ref = head_weights(R["wh"].reshape(-1, c.L, R["wh"].shape[-1]), c.N, c.H, c.average)
            w_ref64 = head_weights(R["wh64"].reshape(-1, c.L, R["wh"].shape[-1]), c.N, c.H, c.average)
            if c.unbatched:
                w_ref, w_ref64 = w_ref.squeeze(0), w_ref64.squeeze(0)
        for key, ref, ref64 in (("output", R["out"], R["out64"]), ("attn_weights", w_ref, w_ref64)):
            if key not in got:
                continue
            arr, shape, dt = got[key]
            if dt != "FP32":
                return self.fail(c, "/v2 %s datatype %s" % (key, dt))
            if not self.check_tensor(c, "/v2 %s %s" % (c.v2, key), arr, shape, ref, ref64,
                                     ATOL if key == "attn_weights" else None):
                return
            v1 = getattr(c, "v1_replies", {}).get(key)
            if v1 is not None and v1.tobytes() != np.ascontiguousarray(arr, dtype=np.float32).tobytes():
                return self.fail(c, "/v2 %s %s differs from /v1's bits" % (c.v2, key))
        self.count("/v2 requests (%s)" % c.v2)

    def selection_request(self, c, name, sel, average, route, enc=None):
        """One forward with sel over route ("v1", "v2json", "v2binary"): (output, values, indices
        or None, dtype) or None after a failure."""
        r = c.rng
        what = "%s %s avg=%s" % (route, json.dumps(sel), average)
        if route == "v1":
            extra = [("weights_select", json.dumps(sel))]
            if average is not None:
                extra.append(("average_attn_weights", json.dumps(average)))
            if r.random() < 0.3:
                extra.append(("need_weights", "true"))
            body = request_text(c, c.query, c.key, c.value, c.kpm, c.attn_mask, enc,
                                omit=("need_weights", "average_attn_weights"), extra=extra)
            st, j, raw = self.cl.json("POST", "/v1/layers/%s/forward" % name, body)
            if st != 200:
                self.fail(c, "%s (%s): %d %s" % (what, enc, st, raw[:400]))
                return None
            topk = sel.get("top_k") is not None
            want = {"output", "attn_topk" if topk else "attn_weights"}
            if set(j) != want:
                self.fail(c, "%s: reply members %s, want %s" % (what, sorted(j), sorted(want)))
                return None
            out = dec_reply_tensor(j["output"])[0]
            if topk:
                vals, vshape, _, vdt = dec_reply_tensor(j["attn_topk"]["values"], None, True)
                idx, ishape, _, idt = dec_reply_tensor(j["attn_topk"]["indices"], None, True)
                if ishape != vshape or idt not in (None, "int32"):
                    self.fail(c, "%s: indices %s %s, values %s" % (what, ishape, idt, vshape))
                    return None
                return out, vals, idx, vdt
            vals, vshape, _, vdt = dec_reply_tensor(j["attn_weights"], None, True)
            return out, vals, None, vdt
        params = v2_selection_params({k: v for k, v in sel.items() if v is not None})
        if not params:                 # nothing chosen: the full map, asked the usual way
            params["need_weights"] = True
        if average is not None:
            params["average_attn_weights"] = average
        if c.causal_field is not None:
            params["is_causal"] = c.causal_field
        binary = route == "v2binary"
        if binary and r.random() < 0.7:
            params["binary_data_output"] = True
        body, hl = v2_body(c, params, binary)
        headers = {"Inference-Header-Content-Length": str(hl)} if hl is not None else None
        st, raw = self.cl.call("POST", "/v2/models/%s/infer" % name, body,
                               ctype="application/octet-stream" if hl is not None else "application/json",
                               headers=headers)
        if st != 200:
            self.fail(c, "%s: %d %s" % (what, st, raw[:400]))
            return None
        try:
            got, j = v2_reply(st, raw, self.cl.headers)
        except (ValueError, KeyError, TypeError) as e:
            self.fail(c, "%s: reply %s" % (what, e))
            return None
        topk = sel.get("top_k") is not None
        want = {"output"} | ({"attn_topk_indices", "attn_topk_values"} if topk else {"attn_weights"})
        if set(got) != want:
            self.fail(c, "%s: outputs %s, want %s" % (what, sorted(got), sorted(want)))
            return None
        wdt = {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16"}
        vals, _, vdt = got["attn_topk_values" if topk else "attn_weights"]
        if vdt not in wdt or wdt[vdt] != (sel.get("dtype") or "float32"):
            self.fail(c, "%s: datatype %s" % (what, vdt))
            return None
        idx = None
        if topk:
            idx, ishape, idt = got["attn_topk_indices"]
            if idt != "INT32" or ishape != list(vals.shape):
                self.fail(c, "%s: indices %s %s" % (what, idt, ishape))
                return None
        return got["output"][0], vals, idx, wdt[vdt]

    def select(self, c, name, n):
        """A random selection over /v1 (any encoding) or /v2 (JSON or binary), checked
          - against torch: the per-head weights sliced, averaged over the chosen heads (sum / h'),
            top-k by torch's stable descending sort, pooled (float64 mean, max), rounded by torch's
            .half() / .bfloat16(): within the tolerance (plus the dtype's half ulp);
          - for the mechanics, exactly: the chosen map is the full map's own numbers (per head: bit
            for bit), the top-k and pool are torch's sort and block max / float64 mean of attnd's
            chosen map, the half-precision answer is torch's rounding of the float32 one, bit for
            bit, and the output does not change by any selection."""
        R = c.refs
        r = c.rng
        S = R["wh"].shape[-1]
        sel = draw_selection(r, c.H, c.L, S)
        if r.random() < 0.1:          # null members are not given
            sel[r.choice(["heads", "queries", "keys", "top_k", "pool", "pool_op", "dtype"])] = None
        clean = {k: v for k, v in sel.items() if v is not None}
        average = r.choice([None, True, False, False])
        avg = average is not False
        route = r.choice(["v1", "v1", "v1", "v2json", "v2binary"])
        enc = r.choice(FORMS + [None])
        what = "select #%d %s %s avg=%s %s" % (n, route, json.dumps(sel), average, enc or "")
        got = self.selection_request(c, name, sel, average, route, enc)
        if got is None:
            return
        out, vals, idx, vdt = got
        dtype = clean.get("dtype", "float32")
        # the output is unchanged, bit for bit
        v1 = getattr(c, "v1_replies", {}).get("output")
        if v1 is not None and v1.tobytes() != np.ascontiguousarray(out, dtype=np.float32).tobytes():
            return self.fail(c, "%s: the output changed with the selection" % what)
        if enc in ("flat", "base64") and route == "v1" and vdt != dtype and not (vdt is None and enc == "flat"):
            return self.fail(c, "%s: dtype %s, asked %s" % (what, vdt, dtype))
        # torch's numbers
        x32 = select_slice(R["wh"], clean, avg)
        x64 = select_slice(R["wh64"], clean, avg)
        if c.unbatched:
            x32, x64 = x32.squeeze(0), x64.squeeze(0)
        v32, i32 = sel_reduce(x32, clean)
        v64, _ = sel_reduce(x64, clean)
        if dtype == "float32":
            if not self.check_tensor(c, what, vals, list(vals.shape), v32, v64, ATOL):
                return
        else:
            v32r = torch.from_numpy(round_dtype(v32.numpy(), dtype))
            slack = 2.0 ** -11 if dtype == "float16" else 2.0 ** -8
            if not self.check_rounded(c, what, vals, list(vals.shape), v32r, v64, ATOL, slack):
                return
        if "top_k" in clean:
            if list(idx.shape) != list(i32.shape):
                return self.fail(c, "%s: indices shape %s, torch %s" % (what, list(idx.shape), list(i32.shape)))
            if not self.check_topk_rows(c, what, idx, vals, x32, clean, ATOL + loose_of(c, x32, x64)):
                return
        # the mechanics, exactly, on attnd's own numbers: the chosen map in float32 (base64)
        base = {k: v for k, v in clean.items() if k in ("heads", "queries", "keys")}
        got_b = self.selection_request(c, name, base, average, "v1", "base64")
        if got_b is None:
            return
        m = got_b[1]
        if out.tobytes() != got_b[0].tobytes():
            return self.fail(c, "%s: the output changed with the selection" % what)
        if not avg:
            full = getattr(c, "full_heads", None)
            if full is None:
                got_f = self.selection_request(c, name, {}, False, "v1", "base64")
                if got_f is None:
                    return
                full = c.full_heads = got_f[1] if not c.unbatched else got_f[1][None]
            mine = select_slice(torch.from_numpy(np.array(full, dtype=np.float32)), base, False)
            if c.unbatched:
                mine = mine.squeeze(0)
            if mine.numpy().tobytes() != np.ascontiguousarray(m).tobytes():
                return self.fail(c, "%s: the chosen map is not the full map's slice, bit for bit" % what)
        mt = torch.from_numpy(np.array(m, dtype=np.float32))
        want_v, want_i = sel_reduce(mt, clean)
        want_v = want_v.numpy()
        if dtype != "float32":
            want_v = round_dtype(want_v, dtype)
        if "pool" in clean and clean.get("pool_op", "mean") == "mean":
            # a float64 sum in attnd's order: the float32 mean may differ by its last bit
            ok = np.allclose(vals, want_v, rtol=2 ** -22 if dtype == "float32" else 2 ** -7, atol=1e-38)
        else:
            ok = np.ascontiguousarray(vals, dtype=np.float32).tobytes() == \
                np.ascontiguousarray(want_v, dtype=np.float32).tobytes()
        if not ok:
            d = np.abs(np.asarray(vals, np.float64) - want_v).reshape(-1)
            i = int(np.argmax(d))
            return self.fail(c, "%s: not torch's %s of attnd's chosen map: [%d] %.9g vs %.9g" % (
                what, "top-k" if "top_k" in clean else "pool" if "pool" in clean else dtype, i,
                np.asarray(vals).reshape(-1)[i], want_v.reshape(-1)[i]))
        if want_i is not None and not np.array_equal(np.asarray(idx, np.int64), want_i.numpy()):
            return self.fail(c, "%s: indices %s, torch's stable sort of attnd's map %s" % (
                what, np.asarray(idx, np.int64).reshape(-1)[:16].tolist(), want_i.reshape(-1)[:16].tolist()))
        self.count("selections (%s)" % route)
        for tag in selection_tags(clean, avg):
            self.count("selections: " + tag)

    def bad_select(self, c, name):
        """A selection that breaks one rule: 400 naming the member, on /v1 or /v2."""
        r = c.rng
        S = c.refs["wh"].shape[-1]
        sel, member = bad_selections(r, c.H, c.L, S)
        if r.random() < 0.6:
            route = r.choice(["forward", "forward", "trace"])
            extra = [("weights_select", json.dumps(sel))]
            body = request_text(c, c.query, c.key, c.value, c.kpm, c.attn_mask, None,
                                omit=("need_weights",), extra=extra)
            st, j, raw = self.cl.json("POST", "/v1/layers/%s/%s" % (name, route), body)
            err = j.get("error", {}) if isinstance(j, dict) else {}
            if st != 400 or err.get("field") != "weights_select." + member:
                return self.fail(c, "bad selection %s on %s: %d %s, want 400 naming weights_select.%s"
                                 % (json.dumps(sel), route, st, raw[:300], member))
            self.count("bad selections refused (/v1 %s)" % route)
            return
        params = v2_selection_params({k: v for k, v in sel.items() if k != "dtype"})
        pname = "weights_datatype" if member == "dtype" else "weights_" + member
        if member == "dtype":
            params["weights_datatype"] = r.choice(["FP64", "float16", "fp16", "INT8"])
        body, hl = v2_body(c, params, False)
        st, raw = self.cl.call("POST", "/v2/models/%s/infer" % name, body)
        try:
            msg = json.loads(raw).get("error", "")
        except ValueError:
            msg = ""
        if st != 400 or pname not in msg:
            return self.fail(c, "bad selection %s on /v2: %d %s, want 400 naming %s" % (params, st, raw[:300], pname))
        self.count("bad selections refused (/v2)")

    def refusal(self, c, name):
        """One input with a broken shape: torch and attnd must agree on refusing it (torch's own
        checks, on a torch layer of the same E, kdim, vdim and H); or positions that break a rule:
        a 400 naming them."""
        r = c.rng
        if c.mod is None or (c.variants and r.random() < 0.3):
            return self.bad_positions(c, name)
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
        # positions left out: they are drawn for the unbroken shapes
        body = request_text(c, q, k, v, kpm, am, None, omit=("positions", "key_positions"))
        st, j, raw = self.cl.json("POST", "/v1/layers/%s/forward" % name, body)
        self.count("refusal probes (torch %s)" % ("accepts" if torch_ok else "refuses"))
        if torch_ok and st != 200:
            return self.fail(c, "broken %s: torch accepts, attnd %d %s" % (what, st, raw[:300]))
        if not torch_ok and st != 400:
            return self.fail(c, "broken %s: torch refuses (%s), attnd %d" % (what, torch_msg, st))
        if st == 400 and not (isinstance(j, dict) and "error" in j and j["error"].get("message")):
            return self.fail(c, "broken %s: 400 without an error body" % what)

    def bad_positions(self, c, name):
        """Positions of the wrong length or rank (400 shape_mismatch) or value (negative,
        fractional, 2^24 and past: 400 bad_request), naming positions or key_positions; on /v1
        forward or trace, or /v2 (the message names the input)."""
        r = c.rng
        which = "key_positions" if r.random() < 0.4 else "positions"
        n = c.S0 if which == "key_positions" else c.L
        good = list(range(n))
        kinds = [("short", "shape_mismatch"), ("long", "shape_mismatch"), ("negative", "bad_request"),
                 ("fraction", "bad_request"), ("2^24", "bad_request"), ("rank", "shape_mismatch")]
        if not c.unbatched:
            kinds.append(("batch", "shape_mismatch"))
        kind, code = r.choice(kinds)
        if kind == "short":
            p = good[:-1] if n > 1 else []
        elif kind == "long":
            p = good + [n]
        elif kind == "negative":
            p = good[:]
            p[r.randrange(n)] = -r.randint(1, 100)
        elif kind == "fraction":
            p = good[:]
            p[r.randrange(n)] = 0.5 + r.randrange(n)
        elif kind == "2^24":
            p = good[:]
            p[r.randrange(n)] = (1 << 24) + r.choice([0, 0, 5, 1 << 30])
        elif kind == "rank":
            p = [[good]]
        else:
            p = [good] * (c.N + 1)
        text = json.dumps(p)
        if r.random() < 0.7:
            body = request_text(c, c.query, c.key, c.value, c.kpm, c.attn_mask, None,
                                omit=(which,), extra=[(which, text)])
            route = r.choice(["forward", "forward", "trace"])
            st, j, raw = self.cl.json("POST", "/v1/layers/%s/%s" % (name, route), body)
            err = j.get("error", {}) if isinstance(j, dict) else {}
            if st != 400 or err.get("field") != which or err.get("code") != code:
                return self.fail(c, "%s %s (%s) on %s: %d %s, want 400 %s naming it"
                                 % (which, text[:80], kind, route, st, raw[:300], code))
            self.count("bad positions refused (/v1)")
            return
        # /v2: the same as an INT64 input (a fraction cannot be one: shape errors and values only)
        if kind == "fraction":
            kind, p = "negative", [-1] * n
        body, _ = v2_body(c, {}, False)
        j = json.loads(body)
        j["inputs"] = [i for i in j["inputs"] if i["name"] != which]
        arr = np.array(p, dtype=np.int64)
        j["inputs"].append({"name": which, "datatype": "INT64", "shape": list(arr.shape),
                            "data": arr.reshape(-1).tolist()})
        st, raw = self.cl.call("POST", "/v2/models/%s/infer" % name, json.dumps(j).encode())
        try:
            msg = json.loads(raw).get("error", "")
        except ValueError:
            msg = ""
        if st != 400 or which not in msg:
            return self.fail(c, "/v2 %s %s (%s): %d %s, want 400 naming it" % (which, p, kind, st, raw[:300]))
        self.count("bad positions refused (/v2)")


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
        c.Hkv = c.H
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
        c.causal_field = c.is_causal
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
    text = ("medium=%s large=%s E=%d H=%d kdim=%d vdim=%d bias=%s bkv=%s za=%s batch_first=%s unbatched=%s "
            "kind=%s N=%d L=%d S0=%d kpm=%s mask=%s causal=%s need_weights=%s average=%s extreme=%s upload=%s %s "
            "enc=%s trace=%s" % (c.medium, c.large, c.E, c.H, c.kdim, c.vdim, c.bias, c.bkv, c.za, c.bf_field, c.unbatched,
                                 c.kind, c.N, c.L, c.S0, c.kpm_kind, c.mask_kind, c.is_causal,
                                 c.nw_field, c.avg_field, c.extreme, c.upload, c.st_dtype, c.encodings, c.trace))
    if c.variants or c.pos is not None or c.kpos is not None:
        text += ("\n     head_dim=%d num_kv_heads=%s rope=%s alibi=%s window=%s layer is_causal=%s "
                 "request is_causal=%s positions=%s%s key_positions=%s v2=%s selections=%d bad=%d" % (
                     c.hd, c.Hkv, c.rope, c.alibi, c.window, c.layer_causal, c.causal_field, c.pos_kind,
                     "" if c.pos is None else " " + str(c.pos.tolist())[:60], c.kpos_kind, c.v2,
                     c.selections, c.bad_selections))
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", type=int, help="run only case number I of the seed")
    ap.add_argument("--url", help="a running attnd (default: start --attnd on a free port)")
    ap.add_argument("--attnd", default=os.path.join(HERE, "..", "..", "build", "attnd"))
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--big", type=int, default=2, help="cases with bodies past 1 MiB (default 2)")
    ap.add_argument("--no-variants", action="store_true",
                    help="torch's MHA only (no head_dim, num_kv_heads, rope, alibi, window, positions)")
    ap.add_argument("--no-select", action="store_true", help="no weights_select")
    ap.add_argument("--no-v2", action="store_true", help="no /v2 infer")
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
            c = draw_case(args.seed * 1000003 + i, not args.no_trace, not args.no_variants,
                          not args.no_select, not args.no_v2)
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
    for note in run.ambiguous:
        print("note: " + note)
    env = " ".join("%s=%s" % (k, os.environ[k]) for k in ("ATTND_ISA", "OPENBLAS_CORETYPE") if k in os.environ)
    print("seed %d%s: %d cases; %s; %d failures" % (
        args.seed, " (%s)" % env if env else "", len(idx),
        ", ".join("%s %d" % kv for kv in sorted(run.counts.items())), len(run.failures)))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
