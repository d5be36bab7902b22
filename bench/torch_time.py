#!/usr/bin/env python3
"""torch_time.py - times torch.nn.MultiheadAttention (eval, inference_mode, batch_first,
self-attention) on the engine benchmark's shapes, so bench_engine can print torch's time from the
same run next to ours.

    OPENBLAS_NUM_THREADS=T /usr/bin/python3 bench/torch_time.py --threads T [--shapes S,M,L,XL]

Debian's torch 1.13 runs its GEMMs on OpenBLAS, whose thread count comes from OPENBLAS_NUM_THREADS
(torch.set_num_threads does not change it), so the caller sets both. Prints one line per cell:
"shape mode threads ms" (median), mode nw0 = need_weights off, nw1 = per-head weights.
"""
import argparse
import time

import torch

SHAPES = {"S": (1, 32, 64, 4), "M": (1, 128, 512, 8), "L": (8, 512, 768, 12), "XL": (1, 2048, 1024, 16)}


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
    ap.add_argument("--shapes", default="S,M,L,XL")
    ap.add_argument("--min-time", type=float, default=0.3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.shapes.split(","):
        n, l, e, h = SHAPES[name]
        torch.manual_seed(0)
        mha = torch.nn.MultiheadAttention(e, h, batch_first=True).eval()
        x = torch.rand(n, l, e) * 2 - 1
        for mode in ("nw0", "nw1"):
            nw = mode == "nw1"

            def run():
                with torch.inference_mode():
                    mha(x, x, x, need_weights=nw, average_attn_weights=False)

            print(f"{name} {mode} {args.threads} {median_ms(run, args.min_time):.4f}", flush=True)


if __name__ == "__main__":
    main()
