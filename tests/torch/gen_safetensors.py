#!/usr/bin/python3
"""gen_safetensors.py - golden safetensors files and a hand-written torch layer directory.

Run with Debian's python3 and torch 1.13 (`/usr/bin/python3 tests/torch/gen_safetensors.py`). Debian has
no python3-safetensors, so write_safetensors() below writes the format from its specification
(github.com/huggingface/safetensors, README "Format"), with the Rust implementation's conventions:
  8-byte little-endian header length N; N bytes of compact JSON
    {"__metadata__": {...}, "NAME": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...}
  padded with spaces to a multiple of 8; tensors sorted by name and stored in that order.
The suite never needs torch: the files are committed. Same torch, same files (fixed seeds).

Writes:
  tests/data/safetensors/golden_{f32,f16,bf16,f64}.safetensors   the same tensors in four dtypes
  tests/data/safetensors/expected.json    per file: every tensor's shape and its float32 values
                                          (torch's own conversion of the stored dtype to float32)
  tests/golden_datadir/layers/{name}/config.json + weights.safetensors
                                          layers as a user writes them by hand: a torch
                                          nn.MultiheadAttention's state_dict() saved as safetensors
  tests/golden_datadir/expected.json      per layer: an input and torch's output for it (general
                                          path, grad enabled, eval mode)
"""

import json
import os
import shutil
import struct

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)  # tests/: data/ and golden_datadir/ live there

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}


def tensor_bytes(t):
    """Little-endian bytes of a contiguous tensor (bf16 through its int16 bit pattern)."""
    t = t.contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} as safetensors, as the Rust implementation lays it out."""
    header = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def floats(t):
    """float32 values of t (converted by torch) as a flat list of Python floats (exact)."""
    return [float(x) for x in t.to(torch.float32).reshape(-1).tolist()]


def gen_files():
    out = os.path.join(TESTS, "data", "safetensors")
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    base = {
        "in_proj_weight": torch.randn(12, 4, generator=g),
        "out_proj.bias": torch.randn(4, generator=g),
        "bias_k": torch.randn(1, 1, 4, generator=g),
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 3),
        # edge values: negative zero, an f16 subnormal, the largest f16, tiny and huge numbers
        "edges": torch.tensor([-0.0, 5.9604645e-08, 65504.0, -1e-30, 1e30, 1.0 / 3.0]),
    }
    expected = {}
    for dtype, tag in [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"),
                       (torch.float64, "f64")]:
        tensors = {}
        for k, v in base.items():
            if k == "edges" and dtype == torch.float16:
                v = v[:3]  # 1e30 does not fit in a half
            tensors[k] = v.to(dtype)
        name = "golden_%s.safetensors" % tag
        write_safetensors(os.path.join(out, name), tensors, {"format": "pt", "dtype": tag})
        expected[name] = {k: {"shape": list(v.shape), "data": floats(v)}
                          for k, v in tensors.items()}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


def gen_datadir():
    root = os.path.join(TESTS, "golden_datadir")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "layers"))
    torch.manual_seed(7)
    layers = [
        # name, config (as PUT's "config" and config.json), dtype the user saved
        ("torch_mha", {"embed_dim": 8, "num_heads": 2}, torch.float32),
        ("torch_kv", {"embed_dim": 6, "num_heads": 3, "kdim": 5, "vdim": 4, "add_bias_kv": True,
                      "batch_first": False}, torch.float16),
    ]
    expected = {}
    for name, cfg, dtype in layers:
        m = torch.nn.MultiheadAttention(cfg["embed_dim"], cfg["num_heads"],
                                        kdim=cfg.get("kdim"), vdim=cfg.get("vdim"),
                                        add_bias_kv=cfg.get("add_bias_kv", False),
                                        batch_first=cfg.get("batch_first", True))
        m.eval()
        # give the biases values (torch starts them at zero) so that they are tested too
        with torch.no_grad():
            for k, p in m.named_parameters():
                if "bias" in k:
                    p.copy_(torch.randn_like(p) * 0.1)
            # what the user saves is what the model then holds
            for k, p in m.named_parameters():
                p.copy_(p.to(dtype).to(torch.float32))
        sd = {k: v.to(dtype) for k, v in m.state_dict().items()}
        d = os.path.join(root, "layers", name)
        os.makedirs(d)
        write_safetensors(os.path.join(d, "weights.safetensors"), sd, {"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        E = cfg["embed_dim"]
        N, L, S = 2, 3, 4
        bf = cfg.get("batch_first", True)
        shape = (lambda n, l, e: (n, l, e)) if bf else (lambda n, l, e: (l, n, e))
        q = torch.randn(*shape(N, L, E))
        k = torch.randn(*shape(N, S, cfg.get("kdim", E)))
        v = torch.randn(*shape(N, S, cfg.get("vdim", E)))
        # grad enabled: the general path (F.multi_head_attention_forward), as attnd follows
        out, w = m(q, k, v, need_weights=True, average_attn_weights=True)
        expected[name] = {
            "query": {"shape": list(q.shape), "data": floats(q)},
            "key": {"shape": list(k.shape), "data": floats(k)},
            "value": {"shape": list(v.shape), "data": floats(v)},
            "output": {"shape": list(out.shape), "data": floats(out.detach())},
            "attn_weights": {"shape": list(w.shape), "data": floats(w.detach())},
        }
    with open(os.path.join(root, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    gen_files()
    gen_datadir()
