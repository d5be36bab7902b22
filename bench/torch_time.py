#!/usr/bin/env python3
"""torch_time.py - times torch.nn.MultiheadAttention (eval, inference_mode, self-attention) on the
engine benchmark's shapes, so bench_engine can print torch's time from the same run next to ours.
S, M, L, XL are batch_first; Lseq8 and Mseq64 sequence-first (batch_first=False), as in
bench_engine.c.

    OPENBLAS_NUM_THREADS=T /usr/bin/python3 bench/torch_time.py --threads T [--shapes S,M,L,XL,...]

Debian's torch 1.13 runs its GEMMs on OpenBLAS, whose thread count comes from OPENBLAS_NUM_THREADS
(torch.set_num_threads does not change it), so the caller sets both. Prints one line per cell:
"shape mode threads ms" (median), mode nw0 = need_weights off, nw1 = per-head weights.
"""
import argparse
import time

import torch

# name: (N, L, E, H, batch_first)
SHAPES = {"S": (1, 32, 64, 4, True), "M": (1, 128, 512, 8, True), "L": (8, 512, 768, 12, True),
          "XL": (1, 2048, 1024, 16, True), "Lseq8": (512, 8, 768, 12, False),
          "Mseq64": (64, 64, 768, 12, False)}


def median_ms(fn, min_time):
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_time and len(times) < 2000):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--min-time", type=float, default=0.3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.shapes.split(","):
        n, l, e, h, bf = SHAPES[name]
        torch.manual_seed(0)
        mha = torch.nn.MultiheadAttention(e, h, batch_first=bf).eval()
        x = torch.rand(n, l, e) * 2 - 1 if bf else torch.rand(l, n, e) * 2 - 1
        for mode in ("nw0", "nw1"):
            nw = mode == "nw1"

            def run():
                with torch.inference_mode():
                    mha(x, x, x, need_weights=nw, average_attn_weights=False)

            print(f"{name} {mode} {args.threads} {median_ms(run, args.min_time):.4f}", flush=True)


if __name__ == "__main__":
    main()
