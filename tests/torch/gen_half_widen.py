#!/usr/bin/python3
"""gen_half_widen.py - what torch's .float() makes of every float16 and every bfloat16 value.

Run with Debian's python3 and torch 1.13: /usr/bin/python3 tests/torch/gen_half_widen.py
It writes tests/data/half/widen.json, which tests/ui/unit/half.test.mjs checks web/attnd.js's
decoders against (the test itself never needs torch):
  - "float16_sha256" / "bfloat16_sha256": SHA-256 of the 65536 float32 results (uint32, little-endian,
    in the order of the 16-bit codes 0x0000..0xffff), so every code, NaN payloads and subnormals
    included, is checked bit for bit by a small file;
  - "float16" / "bfloat16": ["0xCODE", "0xFLOAT32BITS"] for the values worth reading when a check
    fails (zeros, the subnormal range, the normal limits, infinities, NaNs).
"""

import hashlib
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "half", "widen.json")


def widen(dtype):
    codes = torch.arange(65536, dtype=torch.int32).to(torch.int16)  # wraps: 0x8000.. become negative
    as_half = codes.view(dtype)
    bits = as_half.float().view(torch.int32).numpy().astype("<i4").view("<u4")
    return bits


def main():
    doc = {"generator": "tests/torch/gen_half_widen.py", "torch": torch.__version__}
    samples = {
        "float16": [0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0155, 0x0200, 0x03FF, 0x83FF, 0x0400, 0x0401,
                    0x3BFF, 0x3C00, 0x3C01, 0x3555, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE00, 0x7FFF],
        "bfloat16": [0x0000, 0x8000, 0x0001, 0x007F, 0x8001, 0x0080, 0x3F80, 0x3EAB, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                     0x7F81, 0x7FC0, 0xFFFF],
    }
    for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        bits = widen(dtype)
        assert bits.shape == (65536,)
        doc[name + "_sha256"] = hashlib.sha256(bits.tobytes()).hexdigest()
        doc[name] = [["0x%04x" % c, "0x%08x" % int(bits[c])] for c in samples[name]]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    lines = []
    for k, v in doc.items():
        if isinstance(v, list):
            rows = ",\n".join("  " + json.dumps(pair) for pair in v)
            lines.append(f' "{k}": [\n{rows}\n ]')
        else:
            lines.append(f' "{k}": {json.dumps(v)}')
    with open(OUT, "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    print("wrote", os.path.relpath(OUT))


if __name__ == "__main__":
    main()
