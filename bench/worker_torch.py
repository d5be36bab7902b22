#!/usr/bin/python3
"""worker_torch.py - torch.nn.MultiheadAttention as a contender of bench/compare.py: reads one command
per line on stdin, answers one JSON line on stdout.

    OPENBLAS_NUM_THREADS=T OMP_NUM_THREADS=T OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/worker_torch.py T
    load DIR N L E H          the layer of bench/peer_models.py (same seed, so the same weights) and x
    time MODE T SAMPLES       MODE nw0 (need_weights=False) or nw1 (per-head weights); T must be this
                              process's thread count
    quit

Debian's torch 1.13 runs its GEMMs on OpenBLAS, whose thread count comes from OPENBLAS_NUM_THREADS
(torch.set_num_threads does not change it), so the caller sets both and this sets
torch.set_num_threads(T). OMP_WAIT_POLICY=PASSIVE: libgomp's threads spin-waiting next to OpenBLAS's
made 2-thread torch 5-60x slower on S and M here. Eval mode under torch.inference_mode() (the fast path,
aten::_native_multi_head_attention). Each sample is the mean of k back-to-back calls, k fixed per
mode so that a sample lasts about 50 ms. Answers {"ms": [...], "k": k} or {"error": "..."}.
"""
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_models import layer  # noqa: E402  (the same weights the models were built with)


def main():
    threads = int(sys.argv[1])
    torch.set_num_threads(threads)
    print(json.dumps({"ready": True, "version": torch.__version__}), flush=True)
    m = x = None
    ks = {}
    for line in sys.stdin:
        w = line.split()
        if not w or w[0] == "quit":
            break
        try:
            if w[0] == "load":
                N, L, E, H = map(int, w[2:6])
                m = layer(E, H)
                x = torch.from_numpy(np.fromfile(os.path.join(w[1], "x.f32"), np.float32).reshape(N, L, E))
                ks.clear()
                reply = {"ok": True}
            elif w[0] == "time":
                mode, t, samples = w[1], int(w[2]), int(w[3])
                if t != threads:
                    raise ValueError("this worker runs %d threads, asked for %d" % (threads, t))
                nw = mode == "nw1"

                def run():
                    with torch.inference_mode():
                        m(x, x, x, need_weights=nw, average_attn_weights=False)

                if mode not in ks:
                    run()
                    t0 = time.perf_counter()
                    run()
                    ks[mode] = max(1, min(10000, round(0.05 / max(time.perf_counter() - t0, 1e-7))))
                k = ks[mode]
                ms = []
                for _ in range(samples):
                    t0 = time.perf_counter()
                    for _ in range(k):
                        run()
                    ms.append((time.perf_counter() - t0) * 1e3 / k)
                reply = {"ms": ms, "k": k}
            else:
                reply = {"error": "unknown command " + w[0]}
        except Exception as e:  # answered, so the driver can report it and go on
            reply = {"error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
