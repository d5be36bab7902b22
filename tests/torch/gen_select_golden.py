#!/usr/bin/python3
"""gen_select_golden.py - torch's numbers for the weights a client chooses (weights_select, issue 25).

Run with Debian's python3 and torch 1.13 (`make golden` runs it, or
`/usr/bin/python3 tests/torch/gen_select_golden.py`). For every golden case of tests/golden/ (every
layer config and mask combination the parity tests cross) it writes tests/golden_select/<case>.json,
and for every case of tests/golden_variants/ (head_dim, grouped-query, RoPE, ALiBi, windows,
positions) tests/golden_select_variants/<case>.json, with a few selections of that case's attention
weights and what torch says they are:

    {"case": "040_opts_bias1_bkv0_za0_masks.json", "torch_version",
     "selections": [{"weights_select": {...}, "average_attn_weights": bool,
                     "expected": {"attn_weights": T} | {"attn_topk": {"indices": T, "values": T}},
                     "expected_scores": T | {"indices": T, "values": T}}, ...]}

T is attnd's base64 tensor form (float32; "dtype": "int32" for indices), shaped as the API answers:
[N,h',L',S'] (averaged [N,L',S']; without N for an unbatched query; the last two [L',k'] with top_k,
[ceil(L'/a), ceil(S'/b)] pooled). expected_scores is the trace's scores stage under the same selection
(always per head; masked keys -inf).

Where the numbers come from: the case's per-head weights and scores, recomputed here with torch ops in
torch 1.13's order (torch_stages.attention_stages, with the case's masks merged as torch 2.x does) and
checked against the case file's own trace where it has one. For the variant cases, the case file's
trace itself (torch ops written from Hugging Face's conventions, torch_stages.variant_stages; per query
head, so grouped-query layers give one map per query head); the four large variant cases carry no
trace and are left out. Then, with torch:
  - the slice: weights[:, heads][:, :, q0:q1, k0:k1]; averaged: its sum over the chosen heads / h'
    (torch's own averaging, sum / num_heads);
  - top-k: the first k of torch.sort(slice, descending=True, stable=True): ties go to the lower key
    index. torch.topk gives the same values but leaves the order of equal values open (on the CPU it
    often puts the higher index first), so its values are checked equal here and its indices are not
    used; indices are absolute (k0 added);
  - pool: each block's mean (in float64, then float32) or max over the cells it holds, edge blocks
    partial;
  - float16 / bfloat16 selections expect the float32 numbers; the test compares them within the
    dtype's rounding, and tests/codec/test_half.c holds the rounding itself to torch's bit for bit.
Selections are drawn from a generator seeded by the case's name: the same torch gives the same files.
"""

import base64
import glob
import json
import os
import random
import sys
import zlib

import numpy as np
import torch

from torch_stages import attention_stages, select_slice

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)


def dec(t):
    """attnd's base64 tensor -> torch tensor (float32 or bool)."""
    raw = base64.b64decode(t["base64"])
    if t.get("dtype") == "bool":
        return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).astype(bool).reshape(t["shape"]))
    return torch.from_numpy(np.frombuffer(raw, dtype="<f4").copy().reshape(t["shape"]))


def enc(t, dtype="float32"):
    t = t.detach().contiguous()
    if dtype == "int32":
        raw = t.numpy().astype("<i4").tobytes()
    else:
        raw = t.to(torch.float32).numpy().astype("<f4").tobytes()
    return {"shape": list(t.shape), "dtype": dtype, "base64": base64.b64encode(raw).decode("ascii")}


def additive(m):
    return torch.where(m, torch.tensor(float("-inf")), torch.tensor(0.0)) if m.dtype == torch.bool \
        else m.to(torch.float32)


def torch_heads(case):
    """The case's per-head weights and scores, [N,H,L,S] each (batch-major), by torch ops."""
    cfg, inp = case["config"], case["inputs"]
    H, bf = cfg["num_heads"], cfg["batch_first"]
    q = dec(inp["query"])
    batched = q.dim() == 3

    def seq_first(t):
        if t is None:
            return None
        if not batched:
            return t.unsqueeze(1)
        return t.transpose(0, 1) if bf else t

    q_in = seq_first(q)
    k_in = seq_first(dec(inp["key"])) if inp.get("key") else q_in
    v_in = seq_first(dec(inp["value"])) if inp.get("value") else k_in
    L, N = q_in.shape[0], q_in.shape[1]
    S0 = k_in.shape[0]
    total = None

    def add(m):
        nonlocal total
        total = m if total is None else total + m

    if inp.get("key_padding_mask"):
        k = additive(dec(inp["key_padding_mask"])).reshape(N, 1, 1, S0)
        add(k.expand(N, H, L, S0).reshape(N * H, L, S0))
    if inp.get("attn_mask"):
        a = additive(dec(inp["attn_mask"]))
        add(a.reshape(1, L, S0).expand(N * H, L, S0) if a.dim() == 2 else a.reshape(N * H, L, S0))
    if inp.get("is_causal"):
        add(additive(torch.triu(torch.ones(L, S0, dtype=torch.bool), diagonal=1))
            .reshape(1, L, S0).expand(N * H, L, S0))
    mask = None if total is None else total.contiguous()
    sd = {name: dec(t) for name, t in case["weights"].items()}
    st, _, _, _ = attention_stages(q_in, k_in, v_in, sd, H, mask, cfg["add_bias_kv"],
                                   cfg["add_zero_attn"], torch.float32)
    w, s = st["attn_weights"], st["scores"]
    if "trace" in case:  # the same numbers as the case file's (both torch's, same order of ops)
        for name, mine in (("attn_weights", w), ("scores", s)):
            theirs = dec(case["trace"][name])
            fin = torch.isfinite(theirs)
            if not (torch.equal(torch.isneginf(mine), torch.isneginf(theirs)) and
                    torch.allclose(mine[fin], theirs[fin], atol=1e-6, rtol=1e-5)):
                sys.exit("%s: %s differs from the case file's trace" % (case["name"], name))
    return w, s, batched


def pick_range(rng, n):
    if rng.random() < 0.35:
        return None
    a = rng.randrange(n)
    return [a, rng.randrange(a + 1, n + 1)]


def choose(rng, H, L, S, kind):
    sel = {}
    if rng.random() < 0.6:
        heads = list(range(H))
        rng.shuffle(heads)
        sel["heads"] = heads[:rng.randint(1, H)]
    q, k = pick_range(rng, L), pick_range(rng, S)
    if q:
        sel["queries"] = q
    if k:
        sel["keys"] = k
    if kind == "top_k":
        sel["top_k"] = rng.choice([1, 2, 3, 5, S + 2]) if rng.random() < 0.8 else rng.randint(1, S)
    elif kind == "pool":
        sel["pool"] = [rng.randint(1, max(1, L // 2 + 1)), rng.randint(1, max(1, S // 2 + 1))]
        sel["pool_op"] = rng.choice(["mean", "max"])
    r = rng.random()
    if r < 0.2:
        sel["dtype"] = "float16"
    elif r < 0.3:
        sel["dtype"] = "bfloat16"
    return sel


def reduce(x, sel):
    """x [..., L', S'] (torch float32) -> what the selection returns for it."""
    if "top_k" in sel:
        k = min(sel["top_k"], x.shape[-1])
        vals, idx = torch.sort(x, dim=-1, descending=True, stable=True)
        vals, idx = vals[..., :k].contiguous(), idx[..., :k].contiguous()
        tv = torch.topk(x, k, dim=-1).values
        if not torch.equal(tv, vals):
            sys.exit("torch.topk's values differ from the stable sort's")
        idx = idx + (sel["keys"][0] if "keys" in sel else 0)
        return {"indices": enc(idx.to(torch.int32), "int32"), "values": enc(vals)}
    if "pool" in sel:
        a, b = sel["pool"]
        Lq, Sk = x.shape[-2], x.shape[-1]
        Lp, Sp = (Lq + a - 1) // a, (Sk + b - 1) // b
        out = torch.empty(x.shape[:-2] + (Lp, Sp), dtype=torch.float32)
        xd = x.to(torch.float64)
        for p in range(Lp):
            for c in range(Sp):
                blk = xd[..., p * a:(p + 1) * a, c * b:(c + 1) * b]
                if sel.get("pool_op") == "max":
                    out[..., p, c] = blk.amax(dim=(-2, -1)).to(torch.float32)
                else:
                    out[..., p, c] = blk.mean(dim=(-2, -1)).to(torch.float32)
        return enc(out)
    return enc(x)


def file_heads(case):
    """The per-head weights and scores of the case file's trace ([N,H,L,S], batch-major)."""
    batched = len(case["inputs"]["query"]["shape"]) == 3
    return dec(case["trace"]["attn_weights"]), dec(case["trace"]["scores"]), batched


def write_dir(cases, out_name, from_file):
    out_dir = os.path.join(TESTS, out_name)
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "[0-9]*.json")):
        os.remove(old)
    paths = sorted(glob.glob(os.path.join(TESTS, cases, "*.json")))
    written = 0
    for path in paths:
        case = json.load(open(path))
        fname = os.path.basename(path)
        if from_file and "trace" not in case:
            continue
        w, s, batched = file_heads(case) if from_file else torch_heads(case)
        N, H, L, S = w.shape
        rng = random.Random(zlib.crc32(fname.encode()))
        selections = []
        for kind in ("map", "top_k", "pool"):
            sel = choose(rng, H, L, S, kind)
            average = rng.random() < 0.5
            x = select_slice(w, sel, average)
            xs = select_slice(s, sel, False)
            if not batched:
                x, xs = x.squeeze(0), xs.squeeze(0)
            got = reduce(x, sel)
            expected = {"attn_topk": got} if "top_k" in sel else {"attn_weights": got}
            selections.append({"weights_select": sel, "average_attn_weights": average,
                               "expected": expected, "expected_scores": reduce(xs, sel)})
        doc = {"case": fname, "torch_version": torch.__version__, "selections": selections}
        with open(os.path.join(out_dir, fname), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        written += 1
    print("wrote %d files to %s" % (written, out_dir))


def main():
    write_dir("golden", "golden_select", False)
    write_dir("golden_variants", "golden_select_variants", True)


if __name__ == "__main__":
    main()
