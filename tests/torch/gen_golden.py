#!/usr/bin/python3
"""gen_golden.py - golden test cases for attnd's attention engine, computed by torch.

Run with Debian's python3 and torch 1.13 (`make golden`, or `/usr/bin/python3 tests/torch/gen_golden.py`).
It rewrites every file in tests/golden/ (see tests/golden/README.md for the format) from fixed seeds,
so the same torch gives the same files. The suite itself never needs torch: the files are committed.

    gen_golden.py                              regenerate tests/golden/ and tests/golden_variants/
    gen_golden.py --random N --seed S --out D  write N random cases (random config and options) to D
                  [--large] [--no-trace]       large shapes; leave the trace out (smaller files)
                  [--variants]                 random cases of the extensions (head_dim, num_kv_heads,
                                               rope, alibi, window, positions) instead

Semantics (README.md, "Coming from torch"): torch.nn.MultiheadAttention in eval mode, float32, with torch 2.x mask merging
(bool masks become 0 / -inf, float masks are added, key_padding_mask + attn_mask + causal mask are
summed) and one deliberate difference from torch 1.x: a query row whose every key is masked gets
weights 0 and head output 0 (torch gives NaN).

Where the numbers come from:
  - output and attention weights: torch's general path, F.multi_head_attention_forward, given the
    merged float mask [N*H, L, S0] (torch pads it itself for bias_kv / zero attention). For cases with
    a fully masked row, torch gives NaN there; those cases take the step-by-step torch computation
    below (NaN rows set to 0), after checking that it agrees with the functional call on every other row.
  - trace stages: the same computation done step by step with torch ops (F.linear, cat, view/transpose,
    baddbmm, softmax, bmm), in torch 1.13's own order, always batch-major. Its output and weights are
    cross-checked against the functional call and against nn.MultiheadAttention's forward with grad
    enabled (the general path), and the whole float32 computation against a float64 one, so that a
    golden number is never further from the exact result than a small part of the test tolerance.
"""

import argparse
import base64
import glob
import json
import math
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F

import torch_stages
from torch_stages import attention_stages, head_weights, repeated_kv_state_dict, variant_stages

# Tests compare with 2e-5 absolute + 1e-4 relative (tests/support/check.h). A golden number must sit
# well inside that of the exact (float64) result, or a correct engine could fail on torch's round-off.
F64_ATOL = 4e-6
F64_RTOL = 2e-5
# The functional call and the step-by-step computation run the same float32 ops, nearly in the same
# order: they must agree far more tightly than the tests ask.
XCHECK_ATOL = 2e-6
XCHECK_RTOL = 1e-5

STAGES = ["q_proj", "k_proj", "v_proj", "q_heads", "k_heads", "v_heads", "scores", "attn_weights",
          "head_outputs", "concat", "output"]

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)  # tests/: the golden files live in tests/golden/


# ---------------------------------------------------------------------------------------------------
# Tensors in attnd's JSON base64 form (docs/api.md, "Tensors in JSON")

def enc(t):
    """A torch tensor as {"shape", "dtype", "base64"}: little-endian float32, or one byte per bool."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bool:
        raw = t.numpy().astype(np.uint8).tobytes()
        dtype = "bool"
    else:
        raw = t.to(torch.float32).numpy().astype("<f4").tobytes()
        dtype = "float32"
    return {"shape": list(t.shape), "dtype": dtype, "base64": base64.b64encode(raw).decode("ascii")}


# ---------------------------------------------------------------------------------------------------
# One case: what to build (a spec) -> torch's numbers (a JSON object)

class Spec:
    """Everything that defines a case. Defaults: a small batch-first self-attention, no masks."""

    def __init__(self, name, description, **kw):
        self.name = name
        self.description = description
        self.E = kw.pop("E", 8)
        self.H = kw.pop("H", 2)
        self.kdim = kw.pop("kdim", None)          # None: E
        self.vdim = kw.pop("vdim", None)
        self.bias = kw.pop("bias", True)
        self.add_bias_kv = kw.pop("add_bias_kv", False)
        self.add_zero_attn = kw.pop("add_zero_attn", False)
        self.layout = kw.pop("layout", "bf")       # "bf" [N,L,E], "sf" [L,N,E], "unbatched" [L,E]
        self.kind = kw.pop("kind", "self")         # "self" (no key/value), "kv" (key only), "cross"
        self.N = kw.pop("N", 2)
        self.L = kw.pop("L", 4)
        self.S = kw.pop("S", None)                 # S0; None: L (required equal for "self")
        self.kpm = kw.pop("kpm", None)             # None, "bool", "float", "float_inf", or a callable
        self.mask = kw.pop("mask", None)           # None, "bool2", "float2", "bool3", "float3",
                                                   # "float2_inf", "float3_inf", or a callable
        self.is_causal = kw.pop("is_causal", False)
        self.need_weights = kw.pop("need_weights", True)
        self.average = kw.pop("average", True)
        self.seed = kw.pop("seed", 0)
        self.expect_fully_masked = kw.pop("expect_fully_masked", None)  # True/False: assert it
        self.scale = kw.pop("scale", 1.0)          # input magnitude
        self.trace = kw.pop("trace", True)         # False: no "trace" in the file (big cases)
        self.strict = kw.pop("strict", True)       # False (--large): float32-vs-float64 distance is
                                                   # reported, not asserted
        if kw:
            raise TypeError("unknown spec fields: %s" % sorted(kw))
        if self.kdim is None:
            self.kdim = self.E
        if self.vdim is None:
            self.vdim = self.E
        if self.S is None:
            self.S = self.L
        if self.layout == "unbatched":
            self.N = 1
        if self.kind in ("self", "same"):  # "same": key sent equal to the query
            assert self.S == self.L and self.kdim == self.E and self.vdim == self.E, self.name
        if self.kind == "kv":
            assert self.kdim == self.vdim, self.name
        assert self.E % self.H == 0, self.name


def make_mask(kind, shape, gen, name):
    """A bool or float mask of the given kind (see Spec.mask / Spec.kpm)."""
    if callable(kind):
        return kind(shape, gen)
    if kind.startswith("bool"):
        return torch.rand(shape, generator=gen) < 0.3
    m = torch.randn(shape, generator=gen)
    if kind.endswith("_inf"):
        m = torch.where(torch.rand(shape, generator=gen) < 0.3, torch.tensor(float("-inf")), m)
    return m


def to_additive(m):
    """torch 2.x: a bool mask becomes 0 / -inf; a float mask is added as it is."""
    if m.dtype == torch.bool:
        return torch.zeros(m.shape, dtype=torch.float32).masked_fill(m, float("-inf"))
    return m.to(torch.float32)


def build(spec):
    """Builds the layer, inputs and masks of a spec: a dict of torch objects (float32)."""
    torch.manual_seed(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed + 7919)
    E, H, N, L, S0 = spec.E, spec.H, spec.N, spec.L, spec.S
    mod = torch.nn.MultiheadAttention(E, H, bias=spec.bias, add_bias_kv=spec.add_bias_kv,
                                      add_zero_attn=spec.add_zero_attn, kdim=spec.kdim,
                                      vdim=spec.vdim, batch_first=(spec.layout == "bf"))
    mod.eval()
    with torch.no_grad():
        # torch initialises biases to zero and bias_k/v small: make them large enough to matter.
        for pname in ("in_proj_bias", "out_proj.bias", "bias_k", "bias_v"):
            p = dict(mod.named_parameters()).get(pname)
            if p is not None:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)

    def seq(length, feat):
        # the layout a client sends: [N,len,feat] / [len,N,feat] / [len,feat]
        if spec.layout == "bf":
            shape = (N, length, feat)
        elif spec.layout == "sf":
            shape = (length, N, feat)
        else:
            shape = (length, feat)
        return torch.randn(shape, generator=gen) * spec.scale

    query = seq(L, E)
    key = value = None
    if spec.kind in ("kv", "cross"):
        key = seq(S0, spec.kdim)
    if spec.kind == "cross":
        value = seq(S0, spec.vdim)

    kpm = attn_mask = None
    if spec.kpm is not None:
        kpm = make_mask(spec.kpm, (S0,) if spec.layout == "unbatched" else (N, S0), gen, "kpm")
    if spec.mask is not None:
        if callable(spec.mask):
            attn_mask = spec.mask(spec, gen)
        else:
            shape = (L, S0) if spec.mask.endswith("2") or spec.mask.endswith("2_inf") else (N * H, L, S0)
            attn_mask = make_mask(spec.mask, shape, gen, "attn_mask")
    return dict(mod=mod, query=query, key=key, value=value, kpm=kpm, attn_mask=attn_mask)


def merged_mask(spec, kpm, attn_mask, dtype):
    """The torch 2.x merge of key_padding_mask, attn_mask and the causal mask: [N*H, L, S0] or None."""
    N, H, L, S0 = spec.N, spec.H, spec.L, spec.S
    total = None

    def add(m):
        nonlocal total
        m = m.to(dtype)
        total = m if total is None else total + m

    if kpm is not None:
        k = to_additive(kpm).reshape(N, 1, 1, S0).expand(N, H, L, S0).reshape(N * H, L, S0)
        add(k)
    if attn_mask is not None:
        a = to_additive(attn_mask)
        a = a.reshape(1, L, S0).expand(N * H, L, S0) if a.dim() == 2 else a.reshape(N * H, L, S0)
        add(a)
    if spec.is_causal:
        causal = torch.triu(torch.ones(L, S0, dtype=torch.bool), diagonal=1)
        add(to_additive(causal).reshape(1, L, S0).expand(N * H, L, S0))
    return None if total is None else total.contiguous()


def to_seq_first(spec, t):
    """A client tensor in the layer's layout -> torch's functional layout [len, N, feat]."""
    if t is None:
        return None
    if spec.layout == "bf":
        return t.transpose(0, 1)
    if spec.layout == "sf":
        return t
    return t.unsqueeze(1)


def params(mod, dtype):
    sd = {k: v.detach().to(dtype) for k, v in mod.state_dict().items()}
    return sd


def step_by_step(spec, objs, dtype):
    """The forward pass with torch ops in torch 1.13's order, every stage kept (batch-major).
    Fully masked rows get weights 0. Returns (stages dict, output in client layout, weights or None,
    per-query-row fully-masked flags [N*H, L])."""
    sd = params(objs["mod"], dtype)
    q_in = to_seq_first(spec, objs["query"]).to(dtype)
    k_in = q_in if objs["key"] is None else to_seq_first(spec, objs["key"]).to(dtype)
    v_in = k_in if objs["value"] is None else to_seq_first(spec, objs["value"]).to(dtype)
    mask = merged_mask(spec, objs["kpm"], objs["attn_mask"], dtype)
    st, out, w, dead = attention_stages(q_in, k_in, v_in, sd, spec.H, mask, spec.add_bias_kv,
                                        spec.add_zero_attn, dtype)
    weights = head_weights(w, spec.N, spec.H, spec.average) if spec.need_weights else None
    return st, from_seq_first(spec, out), squeeze_weights(spec, weights), dead


def from_seq_first(spec, out):
    """torch's [L,N,E] result -> the layer's output layout."""
    if spec.layout == "bf":
        return out.transpose(0, 1).contiguous()
    if spec.layout == "sf":
        return out.contiguous()
    return out.squeeze(1).contiguous()


def squeeze_weights(spec, w):
    if w is None:
        return None
    return (w.squeeze(0) if spec.layout == "unbatched" else w).contiguous()


def functional(spec, objs):
    """torch's general path, F.multi_head_attention_forward, with the merged float mask."""
    sd = params(objs["mod"], torch.float32)
    q = to_seq_first(spec, objs["query"])
    k = q if objs["key"] is None else to_seq_first(spec, objs["key"])
    v = k if objs["value"] is None else to_seq_first(spec, objs["value"])
    mask = merged_mask(spec, objs["kpm"], objs["attn_mask"], torch.float32)
    packed = "in_proj_weight" in sd
    with torch.no_grad():
        out, w = F.multi_head_attention_forward(
            q, k, v, spec.E, spec.H, sd.get("in_proj_weight"), sd.get("in_proj_bias"),
            sd.get("bias_k"), sd.get("bias_v"), spec.add_zero_attn, 0.0, sd["out_proj.weight"],
            sd.get("out_proj.bias"), training=False, key_padding_mask=None,
            need_weights=spec.need_weights, attn_mask=mask, use_separate_proj_weight=not packed,
            q_proj_weight=sd.get("q_proj_weight"), k_proj_weight=sd.get("k_proj_weight"),
            v_proj_weight=sd.get("v_proj_weight"), average_attn_weights=spec.average)
    return from_seq_first(spec, out), squeeze_weights(spec, w)


def functional_native_masks(spec, objs):
    """torch 1.13's own mask handling, where it matches torch 2.x (a bool or no key_padding_mask, no
    is_causal): an independent check of merged_mask. None when it does not apply."""
    kpm, am = objs["kpm"], objs["attn_mask"]
    if spec.is_causal or (kpm is not None and kpm.dtype != torch.bool) or (kpm is None and am is None):
        return None
    sd = params(objs["mod"], torch.float32)
    q = to_seq_first(spec, objs["query"])
    k = q if objs["key"] is None else to_seq_first(spec, objs["key"])
    v = k if objs["value"] is None else to_seq_first(spec, objs["value"])
    if kpm is not None and spec.layout == "unbatched":
        kpm = kpm.unsqueeze(0)
    packed = "in_proj_weight" in sd
    with torch.no_grad():
        out, w = F.multi_head_attention_forward(
            q, k, v, spec.E, spec.H, sd.get("in_proj_weight"), sd.get("in_proj_bias"),
            sd.get("bias_k"), sd.get("bias_v"), spec.add_zero_attn, 0.0, sd["out_proj.weight"],
            sd.get("out_proj.bias"), training=False, key_padding_mask=kpm,
            need_weights=spec.need_weights, attn_mask=am, use_separate_proj_weight=not packed,
            q_proj_weight=sd.get("q_proj_weight"), k_proj_weight=sd.get("k_proj_weight"),
            v_proj_weight=sd.get("v_proj_weight"), average_attn_weights=spec.average)
    return from_seq_first(spec, out), squeeze_weights(spec, w)


def module_forward(spec, objs):
    """nn.MultiheadAttention's own forward with grad enabled (its general path), in the client's layout."""
    mod = objs["mod"]
    q = objs["query"]
    k = q if objs["key"] is None else objs["key"]
    v = k if objs["value"] is None else objs["value"]
    mask = merged_mask(spec, objs["kpm"], objs["attn_mask"], torch.float32)
    with torch.enable_grad():
        out, w = mod(q, k, v, need_weights=spec.need_weights, attn_mask=mask,
                     average_attn_weights=spec.average)
    return out.detach(), None if w is None else w.detach()


def close(a, b, atol, rtol, rows_ok=None):
    """Max violation of |a-b| <= atol + rtol*|b| (<= 0 means close); -inf must meet -inf."""
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    if rows_ok is not None:
        a = a[rows_ok]
        b = b[rows_ok]
    inf_a, inf_b = torch.isinf(a), torch.isinf(b)
    if not torch.equal(inf_a, inf_b) or not torch.equal(a[inf_a], b[inf_b]):
        return float("inf")
    if torch.isnan(a).any() or torch.isnan(b).any():
        return float("inf")
    fa, fb = a[~inf_a], b[~inf_b]
    if fa.numel() == 0:
        return 0.0
    return float(((fa - fb).abs() - (atol + rtol * fb.abs())).max())


def ok_rows(spec, dead, kind):
    """Boolean selector of the entries of an output/weights tensor that belong to query rows with at
    least one allowed key in every head (torch gives NaN on the others)."""
    N, H, L = spec.N, spec.H, spec.L
    row_dead = dead.reshape(N, H, L).any(dim=1)  # [N, L]
    if kind == "out":
        sel = ~row_dead  # [N,L]
        if spec.layout == "sf":
            return sel.transpose(0, 1)
        if spec.layout == "unbatched":
            return sel[0]
        return sel
    # weights: averaged [N,L,S] / [L,S]; per head [N,H,L,S] / [H,L,S]
    if spec.average:
        return ~row_dead if spec.layout != "unbatched" else ~row_dead[0]
    sel = (~dead).reshape(N, H, L)
    return sel if spec.layout != "unbatched" else sel[0]


checked_native = [0]


def run_case(spec):
    """Computes a case and checks torch against itself; returns the JSON object."""
    objs = build(spec)
    st, out, w, dead = step_by_step(spec, objs, torch.float32)
    any_dead = bool(dead.any())
    if spec.expect_fully_masked is not None and spec.expect_fully_masked != any_dead:
        raise AssertionError("%s: expected fully masked rows: %s, got %s"
                             % (spec.name, spec.expect_fully_masked, any_dead))

    xatol, xrtol = (XCHECK_ATOL, XCHECK_RTOL) if spec.strict else (F64_ATOL, F64_RTOL)
    f_out, f_w = functional(spec, objs)
    rows_out = ok_rows(spec, dead, "out") if any_dead else None
    bad = close(out, f_out, xatol, xrtol, rows_out)
    if bad > 0:
        raise AssertionError("%s: step-by-step output differs from F.multi_head_attention_forward"
                             % spec.name)
    if spec.need_weights:
        rows_w = ok_rows(spec, dead, "w") if any_dead else None
        if close(w, f_w, xatol, xrtol, rows_w) > 0:
            raise AssertionError("%s: step-by-step weights differ from the functional call" % spec.name)
    native = functional_native_masks(spec, objs)
    if native is not None:
        if close(f_out, native[0], xatol, xrtol, rows_out) > 0 or (
                spec.need_weights and close(f_w, native[1], xatol, xrtol, rows_w) > 0):
            raise AssertionError("%s: merged mask disagrees with torch's own mask handling" % spec.name)
        checked_native[0] += 1
    m_out, m_w = module_forward(spec, objs)
    if close(f_out, m_out, xatol, xrtol, rows_out) > 0:
        raise AssertionError("%s: nn.MultiheadAttention disagrees with the functional call" % spec.name)
    if spec.need_weights and close(f_w, m_w, xatol, xrtol, rows_w) > 0:
        raise AssertionError("%s: nn.MultiheadAttention weights disagree" % spec.name)

    # float64: every golden number must be near the exact result.
    st64, out64, w64, dead64 = step_by_step(spec, objs, torch.float64)
    assert torch.equal(dead, dead64), spec.name
    for name in STAGES:
        if close(st[name], st64[name], F64_ATOL, F64_RTOL) > 0:
            diff = (st[name].double() - st64[name]).abs()
            diff[torch.isnan(diff)] = 0
            msg = ("%s: float32 stage %s is %.3g from float64 (|x| up to %.3g)" %
                   (spec.name, name, float(diff.max()), float(st64[name][torch.isfinite(st64[name])]
                                                               .abs().max())))
            if spec.strict:
                raise AssertionError(msg)
            print("note: " + msg)

    # Expected output/weights: torch's functional call; where it gives NaN (fully masked rows), the
    # step-by-step numbers (checked above to agree with it on every other row).
    exp_out = out if any_dead else f_out
    exp_w = (w if any_dead else f_w) if spec.need_weights else None

    mod = objs["mod"]
    config = {"embed_dim": spec.E, "num_heads": spec.H, "kdim": spec.kdim, "vdim": spec.vdim,
              "bias": spec.bias, "add_bias_kv": spec.add_bias_kv, "add_zero_attn": spec.add_zero_attn,
              "batch_first": spec.layout == "bf", "dropout": 0.0}
    inputs = {"query": enc(objs["query"])}
    if objs["key"] is not None:
        inputs["key"] = enc(objs["key"])
    if objs["value"] is not None:
        inputs["value"] = enc(objs["value"])
    if objs["kpm"] is not None:
        inputs["key_padding_mask"] = enc(objs["kpm"])
    if objs["attn_mask"] is not None:
        inputs["attn_mask"] = enc(objs["attn_mask"])
    inputs["is_causal"] = spec.is_causal
    inputs["need_weights"] = spec.need_weights
    inputs["average_attn_weights"] = spec.average
    expected = {"output": enc(exp_out)}
    if exp_w is not None:
        expected["attn_weights"] = enc(exp_w)
    case = {
        "name": spec.name,
        "description": spec.description,
        "torch_version": torch.__version__,
        "seed": spec.seed,
        "fully_masked_rows": any_dead,
        "config": config,
        "weights": {k: enc(v) for k, v in mod.state_dict().items()},
        "inputs": inputs,
        "expected": expected,
    }
    if spec.trace:
        case["trace"] = {name: enc(st[name]) for name in STAGES}
    return case


# ---------------------------------------------------------------------------------------------------
# The committed cases

def mask_full_row_bool2(spec, gen):
    """attn_mask [L,S0] bool with query row 1 masked on every key (and a few other entries)."""
    m = torch.rand((spec.L, spec.S), generator=gen) < 0.2
    m[1, :] = True
    return m


def mask_full_row_float3_inf(spec, gen):
    """attn_mask [N*H or H, L, S0] float with -inf over every key of one row of one head."""
    shape = (spec.H, spec.L, spec.S) if spec.layout == "unbatched" else (spec.N * spec.H, spec.L, spec.S)
    m = torch.randn(shape, generator=gen)
    m[shape[0] - 1, 0, :] = float("-inf")
    return m


def kpm_all_true_batch0(shape, gen):
    m = torch.rand(shape, generator=gen) < 0.3
    if len(shape) == 1:
        m[:] = True
    else:
        m[0, :] = True
    return m


def kpm_float_all_inf_last(shape, gen):
    m = torch.randn(shape, generator=gen)
    if len(shape) == 1:
        m[:] = float("-inf")
    else:
        m[-1, :] = float("-inf")
    return m


def kpm_key0(shape, gen):
    """Masks key 0 (and nothing else): with is_causal, query row 0 has no key left."""
    m = torch.zeros(shape, dtype=torch.bool)
    m[..., 0] = True
    return m


def unbatched_mask3(kind):
    """A 3-D mask for unbatched input: [H, L, S0]."""
    def f(spec, gen):
        return make_mask(kind, (spec.H, spec.L, spec.S), gen, "attn_mask")
    return f


def committed_specs():
    specs = []

    def add(name, desc, **kw):
        kw.setdefault("seed", 1000 + len(specs))
        specs.append(Spec(name, desc, **kw))

    layouts = [("bf", "batch_first [N,L,E]"), ("sf", "sequence-first [L,N,E]"),
               ("unbatched", "unbatched [L,E]")]
    kinds = [("self", "self-attention, key and value left out", {}),
             ("kv", "value left out (value = key), L != S", {"S": 6}),
             ("cross", "cross-attention, packed weights, L != S", {"S": 5}),
             ("cross", "cross-attention with kdim/vdim (separate q/k/v_proj_weight)",
              {"S": 6, "kdim": 5, "vdim": 3})]
    weight_modes = [(False, True, "no weights"), (True, True, "averaged weights"),
                    (True, False, "per-head weights")]
    # A. every layout x kind of attention x weights mode, no masks
    for lay, lay_desc in layouts:
        for ki, (kind, kind_desc, extra) in enumerate(kinds):
            for nw, avg, w_desc in weight_modes:
                tag = ["self", "kv", "cross", "kvdim"][ki]
                wtag = "nw" if not nw else ("avg" if avg else "heads")
                add("%s_%s_%s" % (lay, tag, wtag), "%s; %s; %s" % (lay_desc, kind_desc, w_desc),
                    layout=lay, kind=kind, need_weights=nw, average=avg, **extra)

    # B. layer options: bias x add_bias_kv x add_zero_attn
    for bias in (True, False):
        for bkv in (False, True):
            for za in (False, True):
                opt = "bias%d_bkv%d_za%d" % (bias, bkv, za)
                od = "bias=%s, add_bias_kv=%s, add_zero_attn=%s" % (bias, bkv, za)
                for lay, lay_desc in layouts:
                    add("opts_%s_%s" % (opt, lay), "%s; %s; self-attention; per-head weights" % (od, lay_desc),
                        layout=lay, bias=bias, add_bias_kv=bkv, add_zero_attn=za, average=False)
                add("opts_%s_kvdim" % opt, "%s; cross-attention kdim=3 vdim=7, L=3 S=5; averaged" % od,
                    kind="cross", kdim=3, vdim=7, L=3, S=5, bias=bias, add_bias_kv=bkv, add_zero_attn=za)
                add("opts_%s_masks" % opt, "%s; cross-attention with bool key_padding_mask and float "
                    "3-D attn_mask (masks padded for the appended keys); per-head" % od,
                    kind="cross", S=5, kpm="bool", mask="float3", bias=bias, add_bias_kv=bkv,
                    add_zero_attn=za, average=False)

    # C. masks: key_padding_mask kind x attn_mask kind, cross-attention L != S, per-head weights
    kpms = [None, "bool", "float", "float_inf"]
    masks = [None, "bool2", "float2", "float2_inf", "bool3", "float3", "float3_inf"]
    for kp in kpms:
        for am in masks:
            if kp is None and am is None:
                continue
            add("mask_kpm-%s_attn-%s" % (kp or "none", am or "none"),
                "key_padding_mask %s, attn_mask %s; cross-attention L=4 S=6 N=2; per-head weights"
                % (kp or "none", am or "none"), kind="cross", S=6, kpm=kp, mask=am, average=False)
    # unbatched masks: key_padding_mask [S], attn_mask [L,S] or [H,L,S]
    for kp, am in [("bool", None), ("float", None), (None, "bool2"), (None, "float2_inf"),
                   (None, "bool3"), (None, "float3"), (None, "float3_inf"), ("bool", "float3"),
                   ("float_inf", "bool3"), ("float", "float2")]:
        mk = am
        if am and am.startswith(("bool3", "float3")):
            mk = unbatched_mask3(am)
        add("unbatched_mask_kpm-%s_attn-%s" % (kp or "none", am or "none"),
            "unbatched; key_padding_mask %s [S]; attn_mask %s%s; cross L=3 S=5; per-head weights"
            % (kp or "none", am or "none", " [H,L,S]" if am and "3" in am else ""),
            layout="unbatched", kind="cross", L=3, S=5, kpm=kp, mask=mk, average=False)
    for kp, am in [("bool", "bool3"), ("float", "float2"), ("float_inf", "bool2"), (None, "float3_inf"),
                   ("bool", None), (None, "bool3")]:
        add("sf_mask_kpm-%s_attn-%s" % (kp or "none", am or "none"),
            "sequence-first; key_padding_mask %s; attn_mask %s; value left out, L=5 S=3; averaged"
            % (kp or "none", am or "none"), layout="sf", kind="kv", L=5, S=3, kpm=kp, mask=am)
    for bkv, za in [(True, False), (False, True), (True, True)]:
        for kp, am in [("float_inf", "bool2"), ("bool", "float3_inf")]:
            add("pad_bkv%d_za%d_kpm-%s_attn-%s" % (bkv, za, kp, am),
                "add_bias_kv=%s add_zero_attn=%s: masks are padded with an allowed column; "
                "key_padding_mask %s, attn_mask %s; per-head" % (bkv, za, kp, am),
                kind="kv", S=5, add_bias_kv=bkv, add_zero_attn=za, kpm=kp, mask=am, average=False)

    # D. is_causal
    add("causal_self", "is_causal alone (no attn_mask), self-attention L=S=5", L=5, is_causal=True,
        average=False)
    add("causal_self_nw", "is_causal alone, no weights", L=5, is_causal=True, need_weights=False)
    add("causal_cross_l_lt_s", "is_causal, cross L=3 < S=6 (top-left aligned)", kind="cross", L=3,
        S=6, is_causal=True, average=False)
    add("causal_cross_l_gt_s", "is_causal, cross L=6 > S=3 (later rows see every key)", kind="cross",
        L=6, S=3, is_causal=True, average=False)
    add("causal_kpm_bool", "is_causal with a bool key_padding_mask", L=5, is_causal=True, kpm="bool",
        average=False, expect_fully_masked=None)
    add("causal_kpm_float", "is_causal with a float key_padding_mask", L=5, is_causal=True,
        kpm="float", average=False)
    add("causal_attn_bool2", "is_causal merged with a bool 2-D attn_mask", L=5, is_causal=True,
        mask="bool2", average=False)
    add("causal_attn_float3", "is_causal merged with a float 3-D attn_mask", L=5, is_causal=True,
        mask="float3", average=False)
    add("causal_attn_float2_inf", "is_causal merged with a float 2-D attn_mask holding -inf", L=5,
        is_causal=True, mask="float2_inf", average=True)
    add("causal_bias_kv", "is_causal with add_bias_kv: the bias key is never masked", L=4,
        is_causal=True, add_bias_kv=True, average=False)
    add("causal_zero_attn", "is_causal with add_zero_attn: the zero key is never masked", L=4,
        is_causal=True, add_zero_attn=True, average=False)
    add("causal_unbatched", "is_causal, unbatched self-attention", layout="unbatched", L=5,
        is_causal=True, average=False)
    add("causal_sf_kpm_attn", "is_causal, sequence-first, with key_padding_mask and attn_mask",
        layout="sf", L=5, is_causal=True, kpm="float", mask="bool3")
    add("causal_kvdim", "is_causal, cross kdim/vdim, L=S=4", kind="cross", kdim=3, vdim=5,
        is_causal=True, average=False)

    # E. fully masked rows: weights 0, head output 0 (torch: NaN)
    fm = dict(expect_fully_masked=True)
    add("full_kpm_batch0_heads", "every key of batch 0 masked (bool key_padding_mask): weights 0, "
        "head outputs 0, output = out_proj.bias; per-head", kind="cross", S=5, kpm=kpm_all_true_batch0,
        average=False, **fm)
    add("full_kpm_batch0_avg", "every key of batch 0 masked; averaged weights", kind="cross", S=5,
        kpm=kpm_all_true_batch0, **fm)
    add("full_kpm_batch0_nw", "every key of batch 0 masked; no weights", kind="cross", S=5,
        kpm=kpm_all_true_batch0, need_weights=False, **fm)
    add("full_kpm_float_inf", "float key_padding_mask -inf on every key of the last batch",
        kind="kv", S=4, kpm=kpm_float_all_inf_last, average=False, **fm)
    add("full_attn_bool2_row", "bool 2-D attn_mask with one query row masked on every key", L=5,
        mask=mask_full_row_bool2, average=False, **fm)
    add("full_attn_bool2_row_avg", "bool 2-D attn_mask with one fully masked row; averaged", L=5,
        mask=mask_full_row_bool2, **fm)
    add("full_attn_float3_inf_row", "float 3-D attn_mask, -inf over one row of one head only",
        L=4, mask=mask_full_row_float3_inf, average=False, **fm)
    add("full_attn_float3_inf_row_avg", "float 3-D attn_mask, one head's row all -inf; averaged "
        "(the mean counts that head as 0)", L=4, mask=mask_full_row_float3_inf, **fm)
    add("full_causal_kpm_key0", "is_causal + key_padding_mask on key 0: query row 0 has no key",
        L=4, is_causal=True, kpm=kpm_key0, average=False, **fm)
    add("full_unbatched_kpm", "unbatched, every key masked by key_padding_mask [S]",
        layout="unbatched", kind="cross", L=3, S=4, kpm=kpm_all_true_batch0, average=False, **fm)
    add("full_unbatched_attn3", "unbatched, 3-D [H,L,S] float mask with one all -inf row",
        layout="unbatched", L=4, mask=mask_full_row_float3_inf, average=False, **fm)
    add("full_sf_kpm", "sequence-first, every key of batch 0 masked", layout="sf", kind="cross",
        S=3, kpm=kpm_all_true_batch0, average=False, **fm)
    add("notfull_bias_kv", "every given key of batch 0 masked, but add_bias_kv appends a key that "
        "is never masked: no fully masked row", kind="cross", S=4, kpm=kpm_all_true_batch0,
        add_bias_kv=True, average=False, expect_fully_masked=False)
    add("notfull_zero_attn", "every given key of batch 0 masked, but add_zero_attn appends a key "
        "that is never masked: no fully masked row", kind="cross", S=4, kpm=kpm_all_true_batch0,
        add_zero_attn=True, average=False, expect_fully_masked=False)

    # F. edge sizes
    add("h1", "one head (H=1, hd=E=8)", H=1, average=False)
    add("h1_cross_masks", "one head, cross with masks", H=1, kind="cross", S=5, kpm="bool",
        mask="float3", average=False)
    add("hd1", "head_dim 1 (E=H=4)", E=4, H=4, average=False)
    add("hd1_cross_masks", "head_dim 1, cross kdim/vdim and masks", E=4, H=4, kind="cross", S=5,
        kdim=2, vdim=3, kpm="float", mask="bool3", average=False)
    add("e1_h1", "E=H=1", E=1, H=1, kind="cross", S=3, average=False)
    add("l1_s1", "L=S=1", L=1, N=3, kind="cross", S=1, average=False)
    add("l1_s7", "one query, 7 keys", L=1, kind="kv", S=7, average=False)
    add("l7_s1", "7 queries, one key", L=7, kind="kv", S=1, average=False)
    add("n1", "batch of one", N=1, L=3, average=False)
    add("n4_h3", "N=4, H=3, E=12", N=4, E=12, H=3, L=3, kind="cross", S=4, average=False)
    add("scale_big", "inputs of magnitude ~4 (sharper softmax)", scale=4.0, kind="cross", S=5,
        average=False)
    add("odd_dims", "E=6 H=3 kdim=1 vdim=9, L=2 S=3", E=6, H=3, kdim=1, vdim=9, kind="cross", L=2,
        S=3, average=False)

    # G. larger shapes
    add("large_self_64", "L=S=64, E=64, H=4, N=1, self-attention; per-head", E=64, H=4, N=1, L=64,
        average=False)
    add("large_causal_64", "L=S=64, E=64, H=4 (hd=16), N=1, is_causal + bool key_padding_mask; averaged",
        E=64, H=4, N=1, L=64, is_causal=True, kpm="bool")
    add("large_cross_kvdim", "L=32 S=48, E=32, H=4, N=1, kdim=24 vdim=40, float 3-D mask, sf",
        E=32, H=4, N=1, L=32, S=48, kind="cross", kdim=24, vdim=40, mask="float3_inf",
        layout="sf", average=False)

    # G2. bigger than an engine's tiles (queries and keys past 64 and 128), kept small on disk by
    # leaving the trace out: mostly need_weights=false, the path that never holds all the scores
    big = dict(trace=False)
    add("big_self_causal_nw", "E=16 H=2 N=2 L=S=150, is_causal, no weights (no trace stored)",
        E=16, H=2, N=2, L=150, is_causal=True, need_weights=False, **big)
    add("big_cross_kvdim_masks_nw", "E=32 H=4 N=1 L=70 S=260, kdim=24 vdim=40, bool key_padding_mask, "
        "float 2-D attn_mask with -inf, no weights (no trace stored)", E=32, H=4, N=1, L=70, S=260,
        kind="cross", kdim=24, vdim=40, kpm="bool", mask="float2_inf", need_weights=False, **big)
    add("big_cross_masks_avg", "E=16 H=4 N=1 L=40 S=200, float key_padding_mask, bool 3-D attn_mask, "
        "averaged weights (no trace stored)", E=16, H=4, N=1, L=40, S=200, kind="cross",
        kpm="float", mask="bool3", **big)
    add("big_fully_masked_nw", "E=16 H=2 N=2 L=100 S=130, every key of batch 0 masked and is_causal, "
        "no weights: fully masked rows on the streaming path (no trace stored)", E=16, H=2, N=2,
        L=100, S=130, kind="kv", kpm=kpm_all_true_batch0, is_causal=True, need_weights=False,
        expect_fully_masked=True, **big)
    add("big_bkv_za_sf_nw", "E=16 H=2 N=1 L=S=90, sequence-first, add_bias_kv and add_zero_attn, "
        "float key_padding_mask with -inf, no weights (no trace stored)", E=16, H=2, N=1, L=90,
        layout="sf", add_bias_kv=True, add_zero_attn=True, kpm="float_inf", need_weights=False, **big)
    add("big_unbatched_heads", "unbatched E=16 H=4 L=64 S=96, is_causal, per-head weights "
        "(no trace stored)", E=16, H=4, L=64, S=96, layout="unbatched", kind="cross",
        is_causal=True, average=False, **big)

    # H. a spread of random combinations (the same generator as --random)
    rng = random.Random(20240)
    for i in range(40):
        specs.append(random_spec(rng, "mix_%02d" % i, 5000 + i, medium_ok=False))

    # I. large finite mask values (robust ones only: a whole row of -1e9 or -1e4 would round
    # differently in any two float32 implementations, so rows keep at least one ordinary key, except
    # with finfo.min, where every score rounds to exactly that value)
    add("mask_float_minus_1e9", "float 2-D attn_mask with -1e9 on about half the keys (never a whole "
        "row) and ordinary values elsewhere", kind="cross", S=6, mask=mask_big_negative(-1e9),
        average=False, expect_fully_masked=False)
    add("mask_float_finfo_min_row", "float 3-D attn_mask holding finfo(float32).min, over a whole "
        "row of one head: not masked (-inf) but added, so that row's weights are uniform",
        L=4, mask=mask_finfo_min_row, average=False, expect_fully_masked=False)
    add("mask_kpm_float_minus_1e4", "float key_padding_mask with -1e4 on some keys (the Hugging Face "
        "convention), never all of a batch", kind="kv", S=5, kpm=kpm_big_negative(-1e4),
        average=False, expect_fully_masked=False)
    add("full_union_kpm_attn", "bool key_padding_mask masks keys 0-1, bool attn_mask masks keys 2-3 "
        "of query row 2: neither masks a whole row, together they do", kind="cross", S=4,
        kpm=kpm_keys01, mask=mask_row2_keys23, average=False, expect_fully_masked=True)
    add("full_union_float_causal", "float key_padding_mask -inf on key 0 of batch 1 plus is_causal: "
        "query row 0 of batch 1 has no key; averaged", L=4, kpm=kpm_float_key0_batch1,
        is_causal=True, expect_fully_masked=True)

    # J. a few more crossings
    add("causal_bkv_za_masks", "is_causal with add_bias_kv and add_zero_attn, bool key_padding_mask "
        "and float 3-D attn_mask: both appended keys stay allowed", kind="cross", L=4, S=5,
        is_causal=True, add_bias_kv=True, add_zero_attn=True, kpm="bool", mask="float3",
        average=False)
    add("full_unbatched_causal_nw", "unbatched, is_causal + key_padding_mask on key 0: query row 0 "
        "has no key; no weights", layout="unbatched", L=4, is_causal=True, kpm=kpm_key0,
        need_weights=False, expect_fully_masked=True)
    add("kv_kvdim_causal_sf", "sequence-first, value left out with kdim=vdim=5, is_causal, L=4 S=6; "
        "per-head", layout="sf", kind="kv", kdim=5, vdim=5, L=4, S=6, is_causal=True, average=False)
    add("cross_nobias_bkv_za_unbatched", "unbatched cross-attention kdim=3 vdim=6, bias=False, "
        "add_bias_kv and add_zero_attn, float key_padding_mask with -inf; averaged",
        layout="unbatched", kind="cross", kdim=3, vdim=6, L=3, S=4, bias=False, add_bias_kv=True,
        add_zero_attn=True, kpm="float_inf")
    # K. is_causal with appended keys past a row block (128 rows): the skipped keys and the bias/zero keys
    add("big_causal_bkv_za_avg", "E=32 H=2 (hd=16) N=2 L=S=150, is_causal, add_bias_kv and "
        "add_zero_attn, bool key_padding_mask, averaged weights (no trace stored)", E=32, H=2, N=2,
        L=150, is_causal=True, add_bias_kv=True, add_zero_attn=True, kpm="bool", **big)
    add("big_causal_bkv_heads_hd8", "E=16 H=2 (hd=8) N=1 L=S=140, is_causal, add_bias_kv, "
        "per-head weights (no trace stored)", E=16, H=2, N=1, L=140, is_causal=True,
        add_bias_kv=True, average=False, **big)
    add("big_causal_za_sf_nw", "E=32 H=2 N=2 L=S=200, sequence-first, is_causal, add_zero_attn, "
        "no weights (no trace stored)", E=32, H=2, N=2, L=200, layout="sf", is_causal=True,
        add_zero_attn=True, need_weights=False, **big)
    return specs


def mask_big_negative(value):
    def f(spec, gen):
        m = torch.randn((spec.L, spec.S), generator=gen)
        big = torch.rand((spec.L, spec.S), generator=gen) < 0.5
        big[:, 0] = False
        return torch.where(big, torch.tensor(value), m)
    return f


def kpm_big_negative(value):
    def f(shape, gen):
        m = torch.randn(shape, generator=gen)
        big = torch.rand(shape, generator=gen) < 0.4
        big[..., -1] = False
        return torch.where(big, torch.tensor(value), m)
    return f


def mask_finfo_min_row(spec, gen):
    shape = (spec.N * spec.H, spec.L, spec.S)
    m = torch.randn(shape, generator=gen)
    lo = torch.finfo(torch.float32).min
    m[torch.rand(shape, generator=gen) < 0.3] = lo
    m[:, :, 0] = 0.5                  # every row keeps an ordinary key ...
    m[1, 2, :] = lo                   # ... but this one: all finfo.min, uniform weights
    return m


def kpm_keys01(shape, gen):
    m = torch.zeros(shape, dtype=torch.bool)
    m[..., 0:2] = True
    return m


def mask_row2_keys23(spec, gen):
    m = torch.zeros((spec.L, spec.S), dtype=torch.bool)
    m[2, 2:4] = True
    return m


def kpm_float_key0_batch1(shape, gen):
    m = torch.randn(shape, generator=gen)
    m[1, 0] = float("-inf")
    return m


def random_spec(rng, name, seed, medium_ok=True, large=False, trace=True):
    """A random valid combination of every option: mostly small shapes, one in five medium (L, S up to
    100, past the tile sizes an engine may use); with large, every case large (L, S up to 300, E up to
    1024, input magnitude 0.5-2)."""
    medium = medium_ok and rng.random() < 0.2
    H = rng.choice([1, 1, 2, 2, 3, 4] + ([6, 8] if medium else []))
    hd = rng.choice([1, 2, 3, 4, 8] + ([16, 5] if medium else []))
    if large:
        H = rng.choice([1, 2, 4, 8, 12, 16])
        hd = rng.choice([8, 16, 32, 64])
    E = H * hd
    layout = rng.choice(["bf", "bf", "sf", "unbatched"])
    kind = rng.choice(["self", "kv", "cross", "cross"])
    kdim = vdim = E
    maxfeat = 200 if large else 9
    if kind == "kv" and rng.random() < 0.4:
        kdim = vdim = rng.randint(1, maxfeat)
    if kind == "cross" and rng.random() < 0.5:
        kdim, vdim = rng.randint(1, maxfeat), rng.randint(1, maxfeat)
    N = rng.randint(1, 2 if large else 3)
    maxlen = 300 if large else (100 if medium else 7)
    L = rng.randint(1, maxlen)
    S = L if kind == "self" else rng.randint(1, maxlen)
    kpm = rng.choice([None, None, "bool", "float", "float_inf"])
    mask = rng.choice([None, None, "bool2", "float2", "float2_inf", "bool3", "float3", "float3_inf"])
    if mask and "3" in mask and layout == "unbatched":
        mask = unbatched_mask3(mask)
    is_causal = rng.random() < 0.25
    nw = rng.random() < 0.75
    avg = rng.random() < 0.5
    bias = rng.random() < 0.8
    bkv = rng.random() < 0.3
    za = rng.random() < 0.3
    scale = rng.uniform(0.5, 2.0) if large else 1.0
    desc = ("random: E=%d H=%d kdim=%d vdim=%d bias=%s add_bias_kv=%s add_zero_attn=%s layout=%s "
            "kind=%s N=%d L=%d S=%d kpm=%s attn_mask=%s is_causal=%s need_weights=%s average=%s" %
            (E, H, kdim, vdim, bias, bkv, za, layout, kind, N, L, S, kpm,
             getattr(mask, "__name__", mask) if callable(mask) else mask, is_causal, nw, avg))
    if large:
        desc += " scale=%.3g" % scale
    return Spec(name, desc, E=E, H=H, kdim=kdim, vdim=vdim, bias=bias, add_bias_kv=bkv,
                add_zero_attn=za, layout=layout, kind=kind, N=N, L=L, S=S, kpm=kpm, mask=mask,
                is_causal=is_causal, need_weights=nw, average=avg, seed=seed, scale=scale,
                trace=trace, strict=not large)


def write_cases(specs, out_dir, clean):
    os.makedirs(out_dir, exist_ok=True)
    if clean:
        for old in glob.glob(os.path.join(out_dir, "*.json")):
            os.remove(old)
    names = set()
    total = 0
    for i, spec in enumerate(specs):
        assert spec.name not in names, spec.name
        names.add(spec.name)
        case = run_case(spec)
        path = os.path.join(out_dir, "%03d_%s.json" % (i, spec.name))
        text = json.dumps(case, indent=1) + "\n"
        with open(path, "w") as f:
            f.write(text)
        total += len(text)
    print("%d cases also checked against torch 1.13's own mask handling" % checked_native[0])
    print("wrote %d cases (%.1f KB) to %s" % (len(specs), total / 1024.0, out_dir))


# ---------------------------------------------------------------------------------------------------
# The attention of today's models (docs/api.md): head_dim, num_kv_heads, rope, alibi,
# window, is_causal as a layer default, and request positions. torch 1.13 has none of them, so the
# numbers come from torch_stages.variant_stages (explicit torch ops written from Hugging Face's
# conventions: Llama's repeat_kv and apply_rotary_pos_emb, BLOOM's ALiBi slopes, Mistral's sliding
# window), checked here against torch's own F.multi_head_attention_forward wherever that can express
# the case (every extension off; GQA as MHA with the kv heads' weights repeated) and against HF's
# formulas as written (BLOOM's build_alibi_tensor, Mistral's sliding-window mask, Llama's float32
# inv_freq). Written to tests/golden_variants/, which the HTTP replays of tests/golden/ do not read.

class VSpec:
    """A variant case. Defaults: a small batch-first self-attention with every extension off."""

    def __init__(self, name, description, **kw):
        self.name = name
        self.description = description
        self.E = kw.pop("E", 8)
        self.H = kw.pop("H", 2)
        self.hd = kw.pop("hd", None)              # None: E/H (and head_dim written as E/H)
        self.Hkv = kw.pop("Hkv", None)            # None: H
        self.rope = kw.pop("rope", None)          # theta, or None
        self.alibi = kw.pop("alibi", False)
        self.window = kw.pop("window", None)      # W >= 1, or None
        self.layer_causal = kw.pop("layer_causal", False)  # config is_causal (the request default)
        self.omit_is_causal = kw.pop("omit_is_causal", False)  # inputs leave is_causal out
        self.kdim = kw.pop("kdim", None)
        self.vdim = kw.pop("vdim", None)
        self.bias = kw.pop("bias", True)
        self.add_bias_kv = kw.pop("add_bias_kv", False)
        self.add_zero_attn = kw.pop("add_zero_attn", False)
        self.layout = kw.pop("layout", "bf")
        self.kind = kw.pop("kind", "self")
        self.N = kw.pop("N", 2)
        self.L = kw.pop("L", 5)
        self.S = kw.pop("S", None)
        self.kpm = kw.pop("kpm", None)
        self.mask = kw.pop("mask", None)
        self.is_causal = kw.pop("is_causal", False)
        self.positions = kw.pop("positions", None)          # None, "seq", "batch", "shuffled",
        self.key_positions = kw.pop("key_positions", None)  # "large", or a list (1-D / 2-D)
        self.need_weights = kw.pop("need_weights", True)
        self.average = kw.pop("average", True)
        self.seed = kw.pop("seed", 0)
        self.expect_fully_masked = kw.pop("expect_fully_masked", None)
        self.scale = kw.pop("scale", 1.0)
        self.trace = kw.pop("trace", True)
        self.strict = kw.pop("strict", True)
        if kw:
            raise TypeError("unknown spec fields: %s" % sorted(kw))
        if self.hd is None:
            assert self.E % self.H == 0, self.name
            self.hd = self.E // self.H
        if self.Hkv is None:
            self.Hkv = self.H
        assert self.H % self.Hkv == 0, self.name
        assert self.rope is None or self.hd % 2 == 0, self.name
        self.kdim = self.E if self.kdim is None else self.kdim
        self.vdim = self.E if self.vdim is None else self.vdim
        self.S = self.L if self.S is None else self.S
        if self.layout == "unbatched":
            self.N = 1
        if self.kind in ("self", "same"):  # "same": key sent equal to the query
            assert self.S == self.L and self.kdim == self.E and self.vdim == self.E, self.name
        if self.kind == "kv":
            assert self.kdim == self.vdim, self.name
        if self.omit_is_causal:
            assert self.is_causal == self.layer_causal, self.name

    def plain(self):
        """Every extension off: the case torch's own MHA computes."""
        return (self.hd * self.H == self.E and self.Hkv == self.H and self.rope is None and
                not self.alibi and self.window is None)


def make_positions(kind, N, length, gen):
    """Positions [length] or [N,length] (int64) of a kind (VSpec.positions), or None."""
    if kind is None:
        return None
    if isinstance(kind, list):
        return torch.tensor(kind, dtype=torch.int64)
    rows = N if kind == "batch" else 1
    out = torch.zeros((rows, length), dtype=torch.int64)
    for b in range(rows):
        at = int(torch.randint(0, 20, (1,), generator=gen)) + (100000 if kind == "large" else 0)
        for i in range(length):
            out[b, i] = at
            step = int(torch.randint(0, 8, (1,), generator=gen))
            at += 1 if step < 5 else step - 5          # mostly +1, sometimes 0 (repeated) or +2
        if kind == "shuffled":
            out[b] = out[b][torch.randperm(length, generator=gen)]
    return out if kind == "batch" else out[0]


def expand_positions(p, N, length):
    """[length] / [N,length] / None (0..length-1) -> [N,length]."""
    if p is None:
        return torch.arange(length, dtype=torch.int64).expand(N, length)
    return p.expand(N, length) if p.dim() == 1 else p


def xavier(shape, gen):
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


def build_variant(vs):
    """Weights (torch's init scheme on the new shapes, biases made large enough to matter), inputs,
    masks and positions of a variant spec."""
    gen = torch.Generator().manual_seed(vs.seed + 7919)
    E, H, N, L, S0, hd, Hkv = vs.E, vs.H, vs.N, vs.L, vs.S, vs.hd, vs.Hkv
    Dq, Dkv = H * hd, Hkv * hd
    sd = {}
    if vs.kdim == E and vs.vdim == E:
        sd["in_proj_weight"] = xavier((Dq + 2 * Dkv, E), gen)
    else:
        sd["q_proj_weight"] = xavier((Dq, E), gen)
        sd["k_proj_weight"] = xavier((Dkv, vs.kdim), gen)
        sd["v_proj_weight"] = xavier((Dkv, vs.vdim), gen)
    if vs.bias:
        sd["in_proj_bias"] = torch.randn(Dq + 2 * Dkv, generator=gen) * 0.5
    if vs.add_bias_kv:
        sd["bias_k"] = torch.randn((1, 1, Dkv), generator=gen) * 0.5
        sd["bias_v"] = torch.randn((1, 1, Dkv), generator=gen) * 0.5
    bound = 1.0 / math.sqrt(Dq)  # kaiming_uniform(a=sqrt(5)) over fan_in Dq
    sd["out_proj.weight"] = (torch.rand((E, Dq), generator=gen) * 2 - 1) * bound
    if vs.bias:
        sd["out_proj.bias"] = torch.randn(E, generator=gen) * 0.5

    def seq(length, feat):
        if vs.layout == "bf":
            shape = (N, length, feat)
        elif vs.layout == "sf":
            shape = (length, N, feat)
        else:
            shape = (length, feat)
        return torch.randn(shape, generator=gen) * vs.scale

    query = seq(L, E)
    key = value = None
    if vs.kind in ("kv", "cross"):
        key = seq(S0, vs.kdim)
    if vs.kind == "cross":
        value = seq(S0, vs.vdim)
    if vs.kind == "same":  # self-attention with the key sent: the query's values (value = key)
        key = query.clone()
    kpm = attn_mask = None
    if vs.kpm is not None:
        kpm = make_mask(vs.kpm, (S0,) if vs.layout == "unbatched" else (N, S0), gen, "kpm")
    if vs.mask is not None:
        if callable(vs.mask):
            attn_mask = vs.mask(vs, gen)
        else:
            three = "3" in vs.mask
            lead = H if vs.layout == "unbatched" else N * H
            attn_mask = make_mask(vs.mask, (lead, L, S0) if three else (L, S0), gen, "attn_mask")
    pos = make_positions(vs.positions, N, L, gen)
    kpos = make_positions(vs.key_positions, N, S0, gen)
    return dict(sd=sd, query=query, key=key, value=value, kpm=kpm, attn_mask=attn_mask, pos=pos,
                kpos=kpos)


def variant_positions(vs, objs):
    """Query and key positions [N,L], [N,S0] by the rules of lib/mha.h: given, else 0..L-1; keys
    given, else the query positions in self-attention (key left out, or equal to the query), else
    0..S0-1."""
    qpos = expand_positions(objs["pos"], vs.N, vs.L)
    key = objs["key"]
    if objs["kpos"] is not None:
        kpos = expand_positions(objs["kpos"], vs.N, vs.S)
    elif key is None or (key.shape == objs["query"].shape and
                         torch.equal(key.view(torch.int32), objs["query"].view(torch.int32))):
        kpos = qpos
    else:
        kpos = expand_positions(None, vs.N, vs.S)
    return qpos, kpos


def variant_rules(vs, qpos, kpos):
    """Allowed [N,L,S0]: causal p_j <= p_i; window |p_i - p_j| < W."""
    d = qpos[:, :, None] - kpos[:, None, :]
    ok = torch.ones(d.shape, dtype=torch.bool)
    if vs.is_causal:
        ok &= d >= 0
    if vs.window is not None:
        ok &= (d < vs.window) & (-d < vs.window)
    return ok


def variant_mask(vs, objs, qpos, kpos, dtype):
    """key_padding_mask + attn_mask + the rules (-inf), merged as torch 2.x does: [N*H,L,S0]."""
    N, H, L, S0 = vs.N, vs.H, vs.L, vs.S
    total = None

    def add(m):
        nonlocal total
        m = m.to(dtype)
        total = m if total is None else total + m

    if objs["kpm"] is not None:
        add(to_additive(objs["kpm"]).reshape(N, 1, 1, S0).expand(N, H, L, S0).reshape(N * H, L, S0))
    if objs["attn_mask"] is not None:
        a = to_additive(objs["attn_mask"])
        add(a.reshape(1, L, S0).expand(N * H, L, S0) if a.dim() == 2 else a.reshape(N * H, L, S0))
    if vs.is_causal or vs.window is not None:
        allowed = variant_rules(vs, qpos, kpos)
        add(to_additive(~allowed).reshape(N, 1, L, S0).expand(N, H, L, S0).reshape(N * H, L, S0))
    return None if total is None else total.contiguous()


def variant_step_by_step(vs, objs, dtype):
    sd = {k: v.to(dtype) for k, v in objs["sd"].items()}
    q_in = to_seq_first(vs, objs["query"]).to(dtype)
    k_in = q_in if objs["key"] is None else to_seq_first(vs, objs["key"]).to(dtype)
    v_in = k_in if objs["value"] is None else to_seq_first(vs, objs["value"]).to(dtype)
    qpos, kpos = variant_positions(vs, objs)
    mask = variant_mask(vs, objs, qpos, kpos, dtype)
    st, out, w, dead = variant_stages(q_in, k_in, v_in, sd, vs.H, vs.Hkv, vs.hd, mask,
                                      vs.add_bias_kv, vs.add_zero_attn, dtype, rope_theta=vs.rope,
                                      alibi=vs.alibi, qpos=qpos, kpos=kpos)
    weights = head_weights(w, vs.N, vs.H, vs.average) if vs.need_weights else None
    return st, from_seq_first(vs, out), squeeze_weights(vs, weights), dead


def functional_mha(vs, objs, sd, mask, E, H):
    """F.multi_head_attention_forward (torch's general path) on a state_dict of torch's shapes."""
    q = to_seq_first(vs, objs["query"])
    k = q if objs["key"] is None else to_seq_first(vs, objs["key"])
    v = k if objs["value"] is None else to_seq_first(vs, objs["value"])
    packed = "in_proj_weight" in sd
    with torch.no_grad():
        out, w = F.multi_head_attention_forward(
            q, k, v, E, H, sd.get("in_proj_weight"), sd.get("in_proj_bias"), sd.get("bias_k"),
            sd.get("bias_v"), vs.add_zero_attn, 0.0, sd["out_proj.weight"], sd.get("out_proj.bias"),
            training=False, key_padding_mask=None, need_weights=vs.need_weights, attn_mask=mask,
            use_separate_proj_weight=not packed, q_proj_weight=sd.get("q_proj_weight"),
            k_proj_weight=sd.get("k_proj_weight"), v_proj_weight=sd.get("v_proj_weight"),
            average_attn_weights=vs.average)
    return from_seq_first(vs, out), squeeze_weights(vs, w)


variant_checks = {"functional": 0, "gqa_as_mha": 0, "bloom_alibi": 0, "mistral_window": 0,
                  "rope_relative": 0}


def check_variant(vs, objs, out, w, dead):
    """Checks the step-by-step numbers against torch and HF's formulas wherever they apply."""
    xatol, xrtol = (XCHECK_ATOL, XCHECK_RTOL) if vs.strict else (F64_ATOL, F64_RTOL)
    any_dead = bool(dead.any())
    rows_out = ok_rows(vs, dead, "out") if any_dead else None
    rows_w = ok_rows(vs, dead, "w") if any_dead and vs.need_weights else None
    qpos, kpos = variant_positions(vs, objs)
    mask = variant_mask(vs, objs, qpos, kpos, torch.float32)
    if vs.rope is None and not vs.alibi and vs.hd * vs.H == vs.E:
        # torch itself: plain MHA, or GQA as MHA with the kv heads' rows repeated; the causal and
        # window rules are in the merged mask, positions only move them.
        sd = objs["sd"] if vs.Hkv == vs.H else repeated_kv_state_dict(vs.H, vs.Hkv, vs.hd, objs["sd"])
        f_out, f_w = functional_mha(vs, objs, sd, mask, vs.E, vs.H)
        if close(out, f_out, xatol, xrtol, rows_out) > 0 or (
                vs.need_weights and close(w, f_w, xatol, xrtol, rows_w) > 0):
            raise AssertionError("%s: differs from F.multi_head_attention_forward" % vs.name)
        variant_checks["functional" if vs.Hkv == vs.H else "gqa_as_mha"] += 1
    if (vs.alibi and objs["kpos"] is None and (vs.S != vs.L or objs["pos"] is None) and
            not vs.add_bias_kv and not vs.add_zero_attn):
        # BLOOM adds +m_h * j (key position j = 0..S0-1, no padding) and relies on the softmax's
        # shift invariance; attnd adds -m_h * (p_i - p_j): the weights must agree. (Not with
        # appended keys: their bias is 0 in both forms, so the row constant -m_h * p_i no longer
        # cancels; BLOOM has no such keys.)
        st_b = bloom_form_weights(vs, objs, mask)
        if close(st_b, w_all(vs, objs), F64_ATOL, F64_RTOL) > 0:
            raise AssertionError("%s: ALiBi weights differ from BLOOM's +m*j form" % vs.name)
        variant_checks["bloom_alibi"] += 1
    if vs.window is not None and vs.is_causal and objs["pos"] is None and objs["kpos"] is None:
        # HF Mistral: masked where j > i (causal) or j <= i - W (the sliding window), j the key's
        # index in the cache and i the query's cache position (0..L-1 here, keys 0..S0-1 or the
        # query positions)
        cache_position = torch.arange(vs.L)
        causal = torch.arange(vs.S)[None, :] > cache_position.reshape(-1, 1)
        sliding = torch.arange(vs.S)[None, :] <= (cache_position.reshape(-1, 1) - vs.window)
        hf_allowed = ~(causal | sliding)
        if not torch.equal(hf_allowed.expand(vs.N, vs.L, vs.S), variant_rules(vs, qpos, kpos)):
            raise AssertionError("%s: window differs from Mistral's sliding-window mask" % vs.name)
        variant_checks["mistral_window"] += 1
    if vs.rope is not None:
        # HF's float32 inv_freq: within a few ulps of the correctly rounded one used here
        ours, hf = torch_stages.rope_inv_freq(vs.hd, vs.rope), torch_stages.rope_inv_freq_hf(vs.hd, vs.rope)
        ulps = int((ours.view(torch.int32) - hf.view(torch.int32)).abs().max())
        if ulps > 4:
            raise AssertionError("%s: inv_freq %d ulps off HF's" % (vs.name, ulps))
        variant_checks["inv_freq_max_ulps_off_hf"] = max(variant_checks.get(
            "inv_freq_max_ulps_off_hf", 0), ulps)
        # RoPE's point: q·k depends on p_i - p_j only (float64, shifted positions)
        x = torch.randn((1, 1, 3, vs.hd), dtype=torch.float64)
        y = torch.randn((1, 1, 3, vs.hd), dtype=torch.float64)
        p = torch.tensor([[3, 10, 17]])
        inv = torch_stages.rope_inv_freq(vs.hd, vs.rope).double()

        def rot(t, pos):
            ang = (pos[0][:, None].double() * inv[None, :])
            emb = torch.cat((ang, ang), -1)
            return torch_stages.apply_rotary_pos_emb(t, emb.cos(), emb.sin())

        s1 = rot(x, p) @ rot(y, p + 5).transpose(-1, -2)
        s2 = rot(x, p + 1000) @ rot(y, p + 1005).transpose(-1, -2)
        if not torch.allclose(s1, s2, atol=1e-9, rtol=1e-9):
            raise AssertionError("%s: RoPE scores are not relative" % vs.name)
        variant_checks["rope_relative"] += 1


def w_all(vs, objs):
    """Per-head weights [N*H,L,S] of the case (any need_weights)."""
    saved = (vs.need_weights, vs.average)
    vs.need_weights, vs.average = True, False
    try:
        _, _, w, _ = variant_step_by_step(vs, objs, torch.float64)
    finally:
        vs.need_weights, vs.average = saved
    return w.reshape(-1, vs.L, w.shape[-1]) if w.dim() > 2 else w


def bloom_form_weights(vs, objs, mask):
    """The case's weights with BLOOM's alibi (build_alibi_tensor over an all-ones attention mask,
    +m_h*j) added in place of attnd's, in float64."""
    H = vs.H
    alibi = torch_stages.build_alibi_tensor_bloom(
        torch.ones((vs.N, vs.S), dtype=torch.int64), H, torch.float64)       # [N*H,1,S0]
    saved = vs.alibi
    vs.alibi = False
    try:
        m = alibi.expand(vs.N * H, vs.L, vs.S)
        merged = m if mask is None else m + mask.double()
        sd = {k: v.double() for k, v in objs["sd"].items()}
        q_in = to_seq_first(vs, objs["query"]).double()
        k_in = q_in if objs["key"] is None else to_seq_first(vs, objs["key"]).double()
        v_in = k_in if objs["value"] is None else to_seq_first(vs, objs["value"]).double()
        qpos, kpos = variant_positions(vs, objs)
        _, _, w, _ = variant_stages(q_in, k_in, v_in, sd, H, vs.Hkv, vs.hd, merged, vs.add_bias_kv,
                                    vs.add_zero_attn, torch.float64, rope_theta=vs.rope,
                                    qpos=qpos, kpos=kpos)
    finally:
        vs.alibi = saved
    return w


def run_variant_case(vs):
    objs = build_variant(vs)
    st, out, w, dead = variant_step_by_step(vs, objs, torch.float32)
    any_dead = bool(dead.any())
    if vs.expect_fully_masked is not None and vs.expect_fully_masked != any_dead:
        raise AssertionError("%s: expected fully masked rows: %s, got %s"
                             % (vs.name, vs.expect_fully_masked, any_dead))
    check_variant(vs, objs, out, w, dead)
    st64, out64, w64, dead64 = variant_step_by_step(vs, objs, torch.float64)
    assert torch.equal(dead, dead64), vs.name
    for name in STAGES:
        if close(st[name], st64[name], F64_ATOL, F64_RTOL) > 0:
            msg = "%s: float32 stage %s too far from float64" % (vs.name, name)
            if vs.strict:
                raise AssertionError(msg)
            print("note: " + msg)

    config = {"embed_dim": vs.E, "num_heads": vs.H, "kdim": vs.kdim, "vdim": vs.vdim,
              "bias": vs.bias, "add_bias_kv": vs.add_bias_kv, "add_zero_attn": vs.add_zero_attn,
              "batch_first": vs.layout == "bf", "dropout": 0.0, "head_dim": vs.hd,
              "num_kv_heads": vs.Hkv}
    if vs.rope is not None:
        config["rope"] = {"theta": vs.rope}
    if vs.alibi:
        config["alibi"] = True
    if vs.window is not None:
        config["window"] = vs.window
    if vs.layer_causal:
        config["is_causal"] = True
    inputs = {"query": enc(objs["query"])}
    if objs["key"] is not None:
        inputs["key"] = enc(objs["key"])
    if objs["value"] is not None:
        inputs["value"] = enc(objs["value"])
    if objs["kpm"] is not None:
        inputs["key_padding_mask"] = enc(objs["kpm"])
    if objs["attn_mask"] is not None:
        inputs["attn_mask"] = enc(objs["attn_mask"])
    if objs["pos"] is not None:
        inputs["positions"] = objs["pos"].tolist()
    if objs["kpos"] is not None:
        inputs["key_positions"] = objs["kpos"].tolist()
    if not vs.omit_is_causal:
        inputs["is_causal"] = vs.is_causal
    inputs["need_weights"] = vs.need_weights
    inputs["average_attn_weights"] = vs.average
    expected = {"output": enc(out)}
    if vs.need_weights:
        expected["attn_weights"] = enc(w)
    case = {"name": vs.name, "description": vs.description, "torch_version": torch.__version__,
            "seed": vs.seed, "fully_masked_rows": any_dead, "config": config,
            "weights": {k: enc(v) for k, v in objs["sd"].items()}, "inputs": inputs,
            "expected": expected}
    if vs.trace:
        case["trace"] = {name: enc(st[name]) for name in STAGES}
    return case


def self_check_plain(specs):
    """variant_stages with every extension off against F.multi_head_attention_forward, on every
    committed torch case (the variants' generator checked on the torch suite)."""
    n = 0
    for spec in specs:
        objs = build(spec)
        sd = params(objs["mod"], torch.float32)
        q_in = to_seq_first(spec, objs["query"])
        k_in = q_in if objs["key"] is None else to_seq_first(spec, objs["key"])
        v_in = k_in if objs["value"] is None else to_seq_first(spec, objs["value"])
        mask = merged_mask(spec, objs["kpm"], objs["attn_mask"], torch.float32)
        hd = spec.E // spec.H
        _, out, w, dead = variant_stages(q_in, k_in, v_in, sd, spec.H, spec.H, hd, mask,
                                         spec.add_bias_kv, spec.add_zero_attn, torch.float32)
        f_out, f_w = functional(spec, objs)
        out = from_seq_first(spec, out)
        any_dead = bool(dead.any())
        rows_out = ok_rows(spec, dead, "out") if any_dead else None
        if close(out, f_out, XCHECK_ATOL, XCHECK_RTOL, rows_out) > 0:
            raise AssertionError("%s: variant_stages (extensions off) differs from "
                                 "F.multi_head_attention_forward" % spec.name)
        if spec.need_weights:
            w = squeeze_weights(spec, head_weights(w, spec.N, spec.H, spec.average))
            rows_w = ok_rows(spec, dead, "w") if any_dead else None
            if close(w, f_w, XCHECK_ATOL, XCHECK_RTOL, rows_w) > 0:
                raise AssertionError("%s: variant_stages weights differ from torch" % spec.name)
        n += 1
    print("variant_stages with every extension off = F.multi_head_attention_forward on %d torch "
          "cases" % n)


# The layer configs the variant cases cross with everything else (small sizes, trace included).
COMBOS = {
    "headdim": dict(E=10, H=4, hd=3),                   # E not divisible by H
    "gqa": dict(E=8, H=4, Hkv=2),
    "mqa": dict(E=12, H=3, Hkv=1),
    "rope": dict(E=8, H=2, rope=10000.0),
    "alibi": dict(E=8, H=4, alibi=True),
    "alibi_h6": dict(E=12, H=6, alibi=True),            # not a power of two: BLOOM's extra slopes
    "window_causal": dict(E=8, H=2, window=2, is_causal=True),
    "window": dict(E=8, H=2, window=2),                 # without is_causal: |p_i - p_j| < W
    "llama": dict(E=12, H=4, Hkv=2, hd=4, rope=10000.0, is_causal=True),
    "mistral": dict(E=12, H=4, Hkv=2, hd=4, rope=10000.0, window=3, is_causal=True),
    "bloom": dict(E=12, H=3, alibi=True, is_causal=True),
    "mqa_rope_window": dict(E=8, H=4, Hkv=1, hd=6, rope=500000.0, window=2, is_causal=True),
    "everything": dict(E=10, H=4, Hkv=2, hd=6, rope=10000.0, alibi=True, window=3,
                       is_causal=True),
}


def committed_variant_specs():
    specs = []

    def add(name, desc, combo=None, **kw):
        kw.setdefault("seed", 20000 + len(specs))
        base = dict(COMBOS[combo]) if combo else {}
        base.update(kw)
        specs.append(VSpec(name, desc, **base))

    # V1. each extension alone, across layouts and weights modes
    modes = [("bf", True, False, "per-head"), ("bf", True, True, "averaged"),
             ("sf", False, True, "no weights"), ("sf", True, False, "per-head"),
             ("unbatched", True, True, "averaged"), ("unbatched", True, False, "per-head")]
    for combo in ("headdim", "gqa", "mqa", "rope", "alibi", "alibi_h6", "window_causal", "window"):
        for lay, nw, avg, wd in modes:
            add("v1_%s_%s_%s" % (combo, lay, "heads" if not avg else "avg" if nw else "nw"),
                "%s (%s) alone; %s layout; %s weights" % (combo, COMBOS[combo], lay, wd),
                combo, layout=lay, need_weights=nw, average=avg)
    # V2. model-like configs x kinds of attention
    kinds = [("self", {}), ("kv", {"S": 7}), ("cross", {"S": 6}),
             ("cross", {"S": 6, "kdim": 5, "vdim": 3})]
    for combo in ("llama", "mistral", "bloom", "mqa_rope_window", "everything"):
        for ki, (kind, extra) in enumerate(kinds):
            tag = ["self", "kv", "cross", "kvdim"][ki]
            add("v2_%s_%s" % (combo, tag), "%s; %s attention %s; per-head weights" %
                (COMBOS[combo], kind, extra), combo, kind=kind, average=False, **extra)
    # V3. bias off, add_bias_kv, add_zero_attn (appended keys: no position, never masked)
    for combo in ("llama", "bloom", "everything"):
        for bias, bkv, za in ((False, False, False), (True, True, False), (True, False, True),
                              (False, True, True)):
            add("v3_%s_bias%d_bkv%d_za%d" % (combo, bias, bkv, za),
                "%s; bias=%s add_bias_kv=%s add_zero_attn=%s; cross L=5 S=6; per-head" %
                (combo, bias, bkv, za), combo, kind="cross", S=6, bias=bias, add_bias_kv=bkv,
                add_zero_attn=za, average=False)
    # V4. masks merged with the rules and ALiBi
    for combo in ("llama", "mistral", "bloom", "everything"):
        for kp, am in (("bool", "float3"), ("float_inf", "bool2"), (None, "float2_inf"),
                       ("float", "bool3")):
            add("v4_%s_kpm-%s_attn-%s" % (combo, kp or "none", am), "%s; key_padding_mask %s, "
                "attn_mask %s; kv L=5 S=6; per-head" % (combo, kp, am), combo, kind="kv", S=6,
                kpm=kp, mask=am, average=False)
    # V5. positions: sorted with gaps and repeats, per batch [N,L], shuffled, large, key positions
    for combo in ("llama", "mistral", "bloom", "everything", "window"):
        add("v5_%s_pos_seq" % combo, "%s; positions [L] sorted with gaps and repeats" % combo,
            combo, positions="seq", average=False)
        add("v5_%s_pos_batch" % combo, "%s; positions [N,L], one row per batch" % combo, combo,
            positions="batch", average=False)
        add("v5_%s_pos_shuffled" % combo, "%s; positions in no order (keys too: self-attention)"
            % combo, combo, positions="shuffled", average=False)
        add("v5_%s_pos_large" % combo, "%s; positions around 100000 (large RoPE angles); averaged"
            % combo, combo, positions="large")
        add("v5_%s_keypos" % combo, "%s; cross L=4 S=6 with query positions [L] and "
            "key_positions [N,S]" % combo, combo, kind="cross", L=4, S=6, positions="seq",
            key_positions="batch", average=False)
    # V6. decode steps: one query at position p against the p+1 keys 0..p
    for combo in ("llama", "mistral", "bloom", "everything"):
        for p, lay in ((0, "bf"), (4, "unbatched"), (9, "sf")):
            add("v6_%s_decode_p%d" % (combo, p), "%s; decode step: query at position %d, keys "
                "0..%d (%s); per-head" % (combo, p, p, lay), combo, kind="kv", L=1, S=p + 1,
                positions=[p], layout=lay, N=2, average=False)
    # V7. is_causal as the layer's default
    add("v7_layer_causal_default", "config is_causal=true, request leaves is_causal out: causal",
        "llama", layer_causal=True, omit_is_causal=True, average=False)
    add("v7_layer_causal_default_window", "config is_causal=true and window=3, request leaves "
        "is_causal out", "mistral", layer_causal=True, omit_is_causal=True, average=False)
    add("v7_layer_causal_overridden", "config is_causal=true, request sets is_causal=false: not "
        "causal", "llama", layer_causal=True, is_causal=False, average=False)
    # V8. rows with no key left
    add("v8_full_window_kpm", "window=2 with is_causal and key_padding_mask on the last two keys "
        "of batch 0: late rows of batch 0 have no key", "window_causal", kpm=kpm_last2_batch0,
        average=False, expect_fully_masked=True)
    add("v8_full_window_far_keys", "window=2 without is_causal, key_positions 50.. far from the "
        "queries 0..4: every row masked; averaged", "window", kind="cross", S=4,
        key_positions=[50, 51, 52, 53], expect_fully_masked=True)
    add("v8_notfull_bkv", "as v8_full_window_far_keys with add_bias_kv: the bias key has no "
        "position and is never masked", "window", kind="cross", S=4,
        key_positions=[50, 51, 52, 53], add_bias_kv=True, average=False, expect_fully_masked=False)
    add("v8_full_causal_keys_after", "is_causal with key positions after every query: every row "
        "masked; no weights", "llama", kind="kv", L=3, S=4, key_positions=[10, 11, 12, 13],
        need_weights=False, expect_fully_masked=True)
    # V9. past the engine's tiles and row blocks (no trace stored)
    big = dict(trace=False)
    add("v9_big_mistral_hd16", "E=64 H=8 Hkv=2 hd=16 rope window=40 causal, N=1 L=S=150; no "
        "weights (no trace)", None, E=64, H=8, Hkv=2, hd=16, rope=10000.0, window=40,
        is_causal=True, N=1, L=150, need_weights=False, **big)
    add("v9_big_bloom_bkv", "E=32 H=4 hd=8 alibi window=50 causal add_bias_kv kpm, N=2 L=S=140; "
        "averaged (no trace)", None, E=32, H=4, hd=8, alibi=True, window=50, is_causal=True,
        add_bias_kv=True, kpm="bool", N=2, L=140, **big)
    add("v9_big_decode", "E=48 H=6 Hkv=3 hd=32 rope alibi causal: decode at position 299 against "
        "300 keys; per-head (no trace)", None, E=48, H=6, Hkv=3, hd=32, rope=10000.0, alibi=True,
        is_causal=True, kind="kv", N=1, L=1, S=300, positions=[299], average=False, **big)
    add("v9_big_window_nc_sf", "E=32 H=2 hd=16 window=30 without causal, sequence-first N=2 "
        "L=S=130; no weights (no trace)", None, E=32, H=2, hd=16, window=30, layout="sf", N=2,
        L=130, need_weights=False, **big)
    # V10. random crossings
    rng = random.Random(31337)
    for i in range(20):
        specs.append(random_variant_spec(rng, "v10_mix_%02d" % i, 30000 + i))
    # V11. keys without positions when S = L: the query positions in self-attention only (key
    # left out, or sent equal to the query as torch's mha(x, x, x) does), else 0..S-1
    for combo in ("llama", "bloom", "everything"):
        add("v11_%s_cross_same_len" % combo, "%s; cross L=S=5 with query positions [L] and no "
            "key_positions: keys at 0..4; per-head" % combo, combo, kind="cross", L=5, S=5,
            positions="seq", average=False)
        add("v11_%s_key_is_query" % combo, "%s; key sent equal to the query, query positions [L] "
            "and no key_positions: keys at the query positions; per-head" % combo, combo,
            kind="same", positions="seq", average=False)
    return specs


def kpm_last2_batch0(shape, gen):
    m = torch.zeros(shape, dtype=torch.bool)
    m[..., -2:] = True
    if len(shape) == 2:
        m[1:, :] = False
    return m


def random_variant_spec(rng, name, seed, large=False, trace=True):
    """A random valid combination of every extension with the torch options."""
    H = rng.choice([1, 2, 3, 4, 6, 8] if not large else [2, 4, 8, 16])
    Hkv = rng.choice([d for d in range(1, H + 1) if H % d == 0])
    if rng.random() < 0.3:
        Hkv = H
    hd = rng.choice([1, 2, 3, 4, 6, 8] if not large else [8, 16, 32, 64])
    rope = rng.choice([None, 10000.0, 500000.0]) if hd % 2 == 0 else None
    alibi = rng.random() < 0.4
    window = rng.choice([None, None, 1, 2, 3, 5])
    E = H * hd if rng.random() < 0.4 else rng.randint(1, 12 if not large else 256)
    layout = rng.choice(["bf", "bf", "sf", "unbatched"])
    kind = rng.choice(["self", "kv", "cross", "cross"])
    kdim = vdim = E
    if kind == "kv" and rng.random() < 0.4:
        kdim = vdim = rng.randint(1, 9)
    if kind == "cross" and rng.random() < 0.5:
        kdim, vdim = rng.randint(1, 9), rng.randint(1, 9)
    N = rng.randint(1, 3)
    maxlen = 7 if not large else 200
    L = rng.randint(1, maxlen)
    S = L if kind == "self" else rng.randint(1, maxlen)
    kpm = rng.choice([None, None, "bool", "float", "float_inf"])
    mask = rng.choice([None, None, "bool2", "float2", "float2_inf", "bool3", "float3"])
    positions = rng.choice([None, None, "seq", "batch", "shuffled"])
    key_positions = rng.choice([None, None, "seq", "batch"]) if kind != "self" else None
    if layout == "unbatched":
        positions = "seq" if positions == "batch" else positions
        key_positions = "seq" if key_positions == "batch" else key_positions
    is_causal = rng.random() < 0.5
    layer_causal = rng.random() < 0.2
    omit = layer_causal and rng.random() < 0.5
    if omit:
        is_causal = True
    nw = rng.random() < 0.75
    avg = rng.random() < 0.5
    bias = rng.random() < 0.8
    bkv = rng.random() < 0.25
    za = rng.random() < 0.25
    desc = ("random variant: E=%d H=%d Hkv=%d hd=%d rope=%s alibi=%s window=%s kdim=%d vdim=%d "
            "bias=%s add_bias_kv=%s add_zero_attn=%s layout=%s kind=%s N=%d L=%d S=%d kpm=%s "
            "attn_mask=%s positions=%s key_positions=%s is_causal=%s layer_causal=%s "
            "need_weights=%s average=%s" %
            (E, H, Hkv, hd, rope, alibi, window, kdim, vdim, bias, bkv, za, layout, kind, N, L, S,
             kpm, mask, positions, key_positions, is_causal, layer_causal, nw, avg))
    return VSpec(name, desc, E=E, H=H, Hkv=Hkv, hd=hd, rope=rope, alibi=alibi, window=window,
                 kdim=kdim, vdim=vdim, bias=bias, add_bias_kv=bkv, add_zero_attn=za, layout=layout,
                 kind=kind, N=N, L=L, S=S, kpm=kpm, mask=mask, positions=positions,
                 key_positions=key_positions, is_causal=is_causal, layer_causal=layer_causal,
                 omit_is_causal=omit, need_weights=nw, average=avg, seed=seed, trace=trace,
                 strict=not large)


def write_variant_cases(specs, out_dir, clean):
    os.makedirs(out_dir, exist_ok=True)
    if clean:
        for old in glob.glob(os.path.join(out_dir, "*.json")):
            os.remove(old)
    names = set()
    total = 0
    for i, vs in enumerate(specs):
        assert vs.name not in names, vs.name
        names.add(vs.name)
        case = run_variant_case(vs)
        path = os.path.join(out_dir, "%03d_%s.json" % (i, vs.name))
        text = json.dumps(case, indent=1) + "\n"
        with open(path, "w") as f:
            f.write(text)
        total += len(text)
    print("variant cases checked: %s" % ", ".join("%s %d" % kv for kv in variant_checks.items()))
    print("wrote %d variant cases (%.1f KB) to %s" % (len(specs), total / 1024.0, out_dir))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--random", type=int, metavar="N", help="write N random cases instead")
    ap.add_argument("--seed", type=int, default=1, help="seed of --random")
    ap.add_argument("--out", help="output directory (default tests/golden)")
    ap.add_argument("--large", action="store_true",
                    help="with --random: large shapes (L, S up to 300, E up to 1024)")
    ap.add_argument("--no-trace", action="store_true", help="with --random: leave the trace out")
    ap.add_argument("--variants", action="store_true",
                    help="with --random: cases of the extensions (head_dim, num_kv_heads, rope, "
                         "alibi, window, positions)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.random is not None:
        if not args.out:
            ap.error("--random needs --out DIR (tests/golden holds the committed cases)")
        rng = random.Random(args.seed)
        if args.variants:
            specs = [random_variant_spec(rng, "random_variant_%d_%d" % (args.seed, i),
                                         args.seed * 100003 + i, large=args.large,
                                         trace=not args.no_trace)
                     for i in range(args.random)]
            write_variant_cases(specs, args.out, clean=False)
        else:
            specs = [random_spec(rng, "random_%d_%d" % (args.seed, i), args.seed * 100003 + i,
                                 large=args.large, trace=not args.no_trace)
                     for i in range(args.random)]
            write_cases(specs, args.out, clean=False)
    else:
        torch_specs = committed_specs()
        write_cases(torch_specs, args.out or os.path.join(TESTS, "golden"), clean=True)
        self_check_plain(torch_specs)
        write_variant_cases(committed_variant_specs(),
                            os.path.join(args.out, "variants") if args.out
                            else os.path.join(TESTS, "golden_variants"), clean=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
