#!/usr/bin/python3
"""gen_half.py - torch's float32 -> float16 / bfloat16 rounding, as a table for tests/codec/test_half.c.

Run with Debian's python3 and torch 1.13 (`make golden` runs it; or
`/usr/bin/python3 tests/torch/gen_half.py`). Writes tests/golden_select/half.json:

    {"torch_version", "count",
     "f32": base64 of the float32 inputs (little-endian),
     "f16": base64 of torch's x.half() (little-endian uint16 bits),
     "bf16": base64 of torch's x.bfloat16()}

The inputs: every boundary of both formats (the float16 subnormals and their halfway points, the
largest float16 and the ties around 65504 / 65520, the bfloat16 maximum, the float32 extremes), runs
of consecutive float32 values around each of them (so every tie is met with an even and an odd
mantissa), infinities, a NaN, zeros of both signs, and random values: uniform bit patterns over the
whole finite range and attention-weight-like values in [0, 1]. Fixed seed: the same torch gives the
same file.
"""

import base64
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "golden_select", "half.json")


def f32_bits(values):
    return np.array(values, dtype=np.float32).view(np.uint32)


def around(bits, n=6):
    """n float32 bit patterns either side of each pattern in bits (same sign)."""
    out = []
    for b in bits:
        for d in range(-n, n + 1):
            v = int(b) + d
            if 0 <= v < 2**32:
                out.append(v)
    return out


def main():
    rng = np.random.default_rng(25)
    pats = []
    # float16 landmarks: smallest subnormal and its half, subnormal/normal edge, ties, max, overflow
    f16_marks = [2.0**-25, 2.0**-24, 1.5 * 2.0**-24, 2.0**-15, 2.0**-14 - 2.0**-25, 2.0**-14,
                 2.0**-14 + 2.0**-24, 1.0, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 2.0, 1024.0, 2048.0,
                 2049.0, 65504.0, 65505.0, 65519.0, 65519.99, 65520.0, 65536.0, 1e5, 0.1, 0.5,
                 1.0 / 3, 2.0 / 3]
    # bfloat16 landmarks: ties at the 16th bit, the largest bfloat16, float32's extremes
    bf_marks = [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 3.3895313892515355e38, 3.3961775292304958e38,
                3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45,
                5.877471754111438e-39]
    for marks in (f16_marks, bf_marks):
        b = f32_bits(marks)
        pats += around(b)
        pats += around(b | np.uint32(0x80000000))
    # every float32 exponent, a few mantissas each, both signs
    for e in range(0, 255):
        for m in (0, 1, 0x1000, 0x0FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x18000, 0x7FFFFF):
            pats.append((e << 23) | m)
            pats.append(0x80000000 | (e << 23) | m)
    pats += [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000]
    # random bit patterns (finite), and weights: softmax rows and uniform [0, 1]
    rand = rng.integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32)
    rand = rand[(rand & 0x7F800000) != 0x7F800000]
    pats += [int(x) for x in rand]
    w = torch.softmax(torch.from_numpy(rng.standard_normal((8, 257)).astype(np.float32) * 4), dim=1)
    pats += [int(x) for x in w.numpy().reshape(-1).view(np.uint32)]
    pats += [int(x) for x in rng.random(2000, dtype=np.float32).view(np.uint32)]
    pats += [int(x) for x in (rng.random(2000, dtype=np.float32) * 1e-4).view(np.uint32)]

    x = torch.from_numpy(np.array(pats, dtype=np.uint32).view(np.float32).copy())
    f16 = x.half().numpy().view(np.uint16)
    bf16 = x.bfloat16().view(torch.int16).numpy().view(np.uint16)
    doc = {
        "torch_version": torch.__version__,
        "count": len(pats),
        "f32": base64.b64encode(x.numpy().astype("<f4").tobytes()).decode("ascii"),
        "f16": base64.b64encode(f16.astype("<u2").tobytes()).decode("ascii"),
        "bf16": base64.b64encode(bf16.astype("<u2").tobytes()).decode("ascii"),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s (%d values)" % (OUT, len(pats)))


if __name__ == "__main__":
    main()
