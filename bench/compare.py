#!/usr/bin/env python3
"""compare.py - attnd's engine against the machine's FMA peak, OpenBLAS, torch and ONNX Runtime, in one
run, interleaved (`make bench`; `make bench-long` runs it with --long).

    bench/compare.py [--shapes S,M,L,XL] [--threads 1,2] [--rounds 3] [--samples 3] [--json FILE]
    bench/compare.py --long [--lens 1024,2048,4096,8192,16384] [--threads 2] [--rounds 3]

Contenders (each a long-lived worker process answering one JSON line per command):
  fma peak   build/bench/fma_peak: register-only FMAs, ymm and (where the CPU has AVX-512) zmm, on one
             thread and on all threads at once; the best sample of the best ISA is the peak each %
             refers to
  sgemm      OpenBLAS cblas_sgemm 1024², on T OpenBLAS threads (build/bench/bench_engine --serve)
  attnd      the engine, mha_forward (bench_engine --serve), with its attention core timed on its own
  attnd avx2 the same engine with ATTND_ISA=avx2 (its AVX2 kernels, libxsmm's AVX2 code), on a CPU with
             AVX-512: what an AVX2-only CPU (Zen 3) runs, timed on this one
  torch      nn.MultiheadAttention, Debian's torch 1.13 (/usr/bin/python3 bench/worker_torch.py), T
             torch and T OpenBLAS threads, OMP_WAIT_POLICY=PASSIVE: with libgomp's default spin-waiting
             next to OpenBLAS's threads, 2-thread torch ran S and M 5-60x slower here
  ORT fused  onnxruntime-node: MatMul+Split -> com.microsoft.MultiHeadAttention -> MatMul+Add
  ORT export onnxruntime-node on the graph torch.onnx.export writes (the only ORT that returns weights)
Every contender runs torch's weights (torch.manual_seed(0)) on the same x and is checked against torch's
output before it is timed (bench/peer_models.py writes the files, cached in build/bench-peers/). A peer
that is not installed, or fails, is printed as "skipped: why"; the others still run.

Interleaving: every round visits every cell of a shape (contender x mode x threads, and the FMA peak)
in an order rotated from round to round; each visit takes SAMPLES samples of about 50 ms (or one pass
when a pass is longer). Cells report the median of all samples. The machine may be shared: compare
ratios within one run.

Shapes are bench_engine.c's: self-attention, batch_first, GFLOP = 8·N·L·E² + 4·N·L·S·E per pass.
--long: N=1, E=1024, H=16, L = S = each length; the engine (and its AVX2 path on an AVX-512 CPU) and fused
ORT only (fresh processes per length, so each one's peak RSS is that length's), per-head weights where they
fit the engine's limits.
"""
import argparse
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
PY = "/usr/bin/python3"  # Debian's torch lives there, not in a pyenv python3 that may come first on PATH
SHAPES = {"S": (1, 32, 64, 4), "M": (1, 128, 512, 8), "L": (8, 512, 768, 12), "XL": (1, 2048, 1024, 16)}
TOL_Y, TOL_W = 1e-4, 1e-5  # max |difference| from torch allowed in outputs and in weights


def gflop(N, L, E):
    return (8 * N * L * E * E + 4 * N * L * L * E) / 1e9


# ------------------------------------------------------------------------------------------------
# The machine

def cpu_info():
    """(one line naming the CPU and its vector ISA, dict for the JSON)"""
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            k = k.strip()
            if k in ("vendor_id", "cpu family", "model", "model name", "flags") and k not in info:
                info[k] = v.strip()
            if not line.strip() and info:
                break
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni",
                       "avx512_bf16") if f in flags]
    fam, model = int(info.get("cpu family", "0")), int(info.get("model", "0"))
    gen = ""
    if info.get("vendor_id") == "AuthenticAMD":
        if fam == 0x17:
            gen = "Zen 2" if model >= 0x30 else "Zen / Zen+"
        elif fam == 0x19:
            gen = "Zen 4" if 0x10 <= model <= 0x1f or 0x60 <= model <= 0xaf else "Zen 3"
        elif fam == 0x1a:
            gen = "Zen 5"
    name = "%s, family %d model %d%s; ISA: %s; %d CPUs" % (
        info.get("model name", "unknown CPU"), fam, model, " (%s)" % gen if gen else "",
        " ".join(isa) or "no AVX2", os.cpu_count() or 0)
    return name, {"name": info.get("model name"), "family": fam, "model": model, "generation": gen,
                  "isa": isa, "cpus": os.cpu_count()}


def fma_peak(isa, threads):
    exe = os.path.join(BUILD, "bench", "fma_peak")
    r = subprocess.run([exe, "--isa", isa, "--threads", str(threads), "--seconds", "0.2"],
                       capture_output=True, text=True, timeout=120)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "skipped" in out:
        raise RuntimeError(out["skipped"])
    return out["gflops"]


def vm_hwm_mb(pid):
    try:
        return int(re.search(r"VmHWM:\s+(\d+)", open("/proc/%d/status" % pid).read()).group(1)) / 1024
    except (OSError, AttributeError):
        return float("nan")


# ------------------------------------------------------------------------------------------------
# Workers

class Worker:
    """A contender's process: one command per line in, one JSON line out."""

    def __init__(self, name, argv, env=None, timeout=1800):
        self.name, self.timeout, self.dead = name, timeout, None
        self.stderr = open(os.path.join(BUILD, "bench-peers", name.replace(" ", "_") + ".stderr"), "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                  text=True, bufsize=1, env=dict(os.environ, **(env or {})), cwd=ROOT)
        self.hello = self._read()

    def _read(self):
        if self.dead:
            raise RuntimeError(self.dead)
        ready, _, _ = select.select([self.p.stdout], [], [], self.timeout)
        line = self.p.stdout.readline() if ready else ""
        if not line:
            self.close()
            tail = open(self.stderr.name).read().strip().splitlines()[-1:] or ["no message"]
            self.dead = "%s %s: %s" % (self.name, "timed out" if not ready else "exited", tail[0][:200])
            raise RuntimeError(self.dead)
        return json.loads(line)

    def ask(self, *words):
        if self.dead:
            raise RuntimeError(self.dead)
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()
        self.stderr.close()


def start(name, argv, env=None):
    """(worker, None) or (None, why it cannot run)"""
    try:
        return Worker(name, argv, env), None
    except (OSError, RuntimeError, ValueError) as e:
        return None, str(e)


class Peers:
    """Which peers this machine can run, and why not the others."""

    def __init__(self):
        self.why = {}
        self.torch_version = self._probe_py("import torch; print(torch.__version__)", "torch", "python3-torch")
        self.onnx = bool(self.torch_version) and bool(self._probe_py("import onnx; print(onnx.__version__)",
                                                                     "onnx", "python3-onnx"))
        self.ort_modules = os.path.join(BUILD, "npm", "node_modules")
        if not shutil.which("node"):
            self.why["ort"] = "no node (apt-get install nodejs)"
        elif not os.path.exists(os.path.join(self.ort_modules, "onnxruntime-node", "package.json")):
            self.why["ort"] = "onnxruntime-node is not installed in %s (scripts/bench_deps.sh)" % self.ort_modules
        elif not self.onnx and "ort" not in self.why:
            self.why["ort"] = "its models need python3-onnx (%s)" % self.why.get("onnx", "?")

    def _probe_py(self, code, key, pkg):
        if not os.path.exists(PY):
            self.why[key] = "no %s" % PY
            return None
        r = subprocess.run([PY, "-c", code], capture_output=True, text=True)
        if r.returncode:
            self.why[key] = "%s cannot import %s (apt-get install %s)" % (PY, key, pkg)
            if key == "torch":
                self.why["ort"] = "its models and references need torch"
            return None
        return r.stdout.strip()


def prepare(peers, name, N, L, E, H, long_mode=False):
    """The shape's directory of bench/peer_models.py files, or "-" (random, unchecked) without torch."""
    if not peers.torch_version:
        return "-"
    d = os.path.join(BUILD, "bench-peers", name)
    argv = [PY, os.path.join(ROOT, "bench", "peer_models.py"), d, str(N), str(L), str(E), str(H)]
    r = subprocess.run(argv + (["--long"] if long_mode else []), capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("peer_models.py %s failed: %s" % (name, (r.stderr.strip().splitlines() or ["?"])[-1]))
    return d


# ------------------------------------------------------------------------------------------------
# Cells: one contender x variant x thread count, timed in rotation

class Cell:
    def __init__(self, who, variant, threads, worker=None, fma_isa=None):
        self.who, self.variant, self.threads = who, variant, threads
        self.worker, self.fma_isa = worker, fma_isa
        self.ms, self.core_ms, self.gflops, self.check, self.error = [], [], [], None, None
        self.extra = {}

    def visit(self, samples):
        if self.error:
            return
        try:
            if self.fma_isa:
                self.gflops.append(fma_peak(self.fma_isa, self.threads))
                return
            r = self.worker.ask("time", self.variant, self.threads, samples)
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
            self.error = str(e)
            return
        if "check" in r and self.check is None:
            self.check = r["check"]
            bad = [k for k, v in r["check"].items() if not v <= (TOL_W if k == "w" else TOL_Y)]
            if bad:
                self.error = "differs from torch: max |diff| %s" % ", ".join(
                    "%s %.2g" % (k, r["check"][k]) for k in bad)
                return
        self.ms += r["ms"]
        self.core_ms += r.get("core_ms", [])
        for k in ("flops", "workspace_bytes", "k"):
            if k in r:
                self.extra[k] = r[k]

    def median_ms(self):
        return statistics.median(self.ms) if self.ms and not self.error else None

    def median_core(self):
        c = [x for x in self.core_ms if x == x]
        return statistics.median(c) if c and not self.error else None

    def json(self):
        return {"who": self.who, "variant": self.variant, "threads": self.threads, "ms": self.ms,
                "core_ms": self.core_ms, "gflops": self.gflops, "check": self.check, "error": self.error,
                **self.extra}


def run_rounds(cells, rounds, samples, label):
    for r in range(rounds):
        order = cells[r % len(cells):] + cells[:r % len(cells)] if cells else []
        if r % 2:
            order.reverse()
        for c in order:
            c.visit(samples)
            time.sleep(0.02)  # let the previous contender's spinning threads go to sleep
        print("  %s: round %d of %d done" % (label, r + 1, rounds), file=sys.stderr, flush=True)


def fma_cells(threads_list, cpu_isa):
    isas = ["ymm"] + (["zmm"] if "avx512f" in cpu_isa else [])
    return [Cell("fma", isa, t, fma_isa=isa) for isa in isas for t in threads_list]


def peak_of(fma, t):
    """The FMA peak at t threads and its ISA: the best sample of the best ISA. The best, not the
    median: the kernel has nothing to wait for, so a lower sample only means that something else
    had the core for a while."""
    best = (None, None)
    for c in fma:
        if c.threads == t and c.gflops:
            g = max(c.gflops)
            if best[0] is None or g > best[0]:
                best = (g, c.variant)
    return best


# ------------------------------------------------------------------------------------------------
# make bench

CONTENDERS = [("attnd", "nw0"), ("attnd", "nw1"), ("attnd avx2", "nw0"), ("attnd avx2", "nw1"),
              ("torch", "nw0"), ("torch", "nw1"),
              ("ORT fused", "fused-nw0"), ("ORT export", "exported-nw0"), ("ORT export", "exported-nw1")]


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def short_bench(args, peers, cpu_isa, out):
    threads_list = [int(t) for t in args.threads.split(",")]
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            sys.exit("unknown shape %s (S, M, L, XL)" % s)
    os.makedirs(os.path.join(BUILD, "bench-peers"), exist_ok=True)
    engine, why = start("attnd", [os.path.join(BUILD, "bench", "bench_engine"), "--serve"])
    if not engine:
        sys.exit("the engine worker did not start: " + why)
    engine_avx2 = None
    if "avx512f" in cpu_isa:  # the AVX2 path as an AVX2-only CPU runs it
        engine_avx2, why = start("attnd avx2", [os.path.join(BUILD, "bench", "bench_engine"), "--serve"],
                                 {"ATTND_ISA": "avx2"})
    print("OpenBLAS: %s" % engine.hello.get("blas"))
    torch_w, ort = {}, None
    if peers.torch_version:
        for t in threads_list:
            env = {"OPENBLAS_NUM_THREADS": str(t), "OMP_NUM_THREADS": str(t), "OMP_WAIT_POLICY": "PASSIVE"}
            torch_w[t], why = start("torch t%d" % t, [PY, os.path.join(ROOT, "bench", "worker_torch.py"), str(t)], env)
            if not torch_w[t]:
                peers.why["torch"] = why
    if "torch" in peers.why:
        print("torch: skipped: %s" % peers.why["torch"])
    else:
        print("torch %s: torch.set_num_threads(T), OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=T, "
              "OMP_WAIT_POLICY=PASSIVE, eval, inference_mode" % peers.torch_version)
    if "ort" not in peers.why:
        ort, why = start("ort", ["node", os.path.join(ROOT, "bench", "worker_ort.js"), peers.ort_modules])
        if not ort:
            peers.why["ort"] = why
    if ort:
        print("ONNX Runtime: onnxruntime-node %s, graphOptimizationLevel 'all', intraOpNumThreads = T, "
              "interOpNumThreads 1, executionMode 'sequential'" % ort.hello.get("version"))
    else:
        print("ONNX Runtime: skipped: %s" % peers.why["ort"])
    done = []  # (shape, cells)
    try:
        for s in shapes:
            N, L, E, H = SHAPES[s]
            d = prepare(peers, s, N, L, E, H)
            cells = fma_cells(threads_list, cpu_isa)
            for w, who in [(engine, "attnd"), (engine_avx2, "attnd avx2"), (ort, "ORT")] + \
                    [(torch_w.get(t), "torch") for t in threads_list]:
                if w:
                    try:
                        w.ask("load", d, N, L, E, H)
                    except RuntimeError as e:
                        print("%s: %s skipped: %s" % (s, who, e))
            for t in threads_list:
                cells.append(Cell("sgemm", "sgemm", t, engine))
                for who, v in CONTENDERS:
                    w = engine if who == "attnd" else engine_avx2 if who == "attnd avx2" else \
                        ort if who.startswith("ORT") else torch_w.get(t)
                    if w and not w.dead:
                        cells.append(Cell(who, v, t, w))
            run_rounds(cells, args.rounds, args.samples, s)
            done.append((s, cells))
    finally:
        for w in [engine, engine_avx2, ort] + list(torch_w.values()):
            if w:
                w.close()
        fma = [c for _, cells in done for c in cells if c.who == "fma"]
        peaks = {t: peak_of(fma, t) for t in threads_list}
        print_peak(peaks, fma)
        out["peak"] = {t: p for t, (p, _) in peaks.items()}
        out["shapes"] = [print_shape(s, cells, threads_list, peaks) for s, cells in done]
    print_goals(out["shapes"], threads_list)


def print_peak(peaks, fma):
    print("\nFMA peak of this run (best sample of the best ISA, GFLOP/s; every % below is of this):")
    for t, (p, isa) in peaks.items():
        per = ", ".join("%s %s" % (i, fmt(peak_of([c for c in fma if c.variant == i], t)[0], ".1f"))
                        for i in ("ymm", "zmm") if any(c.variant == i for c in fma))
        print("  %d thread%s: %s (%s; %d samples)" % (t, "s" if t > 1 else "", fmt(p, ".1f"), per,
                                                     sum(len(c.gflops) for c in fma if c.threads == t)))


def print_shape(s, cells, threads_list, peaks):
    N, L, E, H = SHAPES[s]
    gf = gflop(N, L, E)
    core_gf = 4 * N * L * L * E / 1e9
    print("\n== %s: N=%d L=S=%d E=%d H=%d, %.4g GFLOP per pass (attention core %.3g)" % (s, N, L, E, H, gf, core_gf))
    print("%2s %-4s %-18s %10s %10s %9s %6s %8s  %s" % ("t", "mode", "contender", "ms", "best ms", "GFLOP/s",
                                                        "%peak", "vs ORTf", "check (max |diff| vs torch)"))
    res = {"shape": s, "N": N, "L": L, "E": E, "H": H, "gflop": gf, "cells": [c.json() for c in cells],
           "peak": {}}
    for t in threads_list:
        peak = peaks[t][0]
        res["peak"][t] = peak
        ortf = next((c.median_ms() for c in cells if c.who == "ORT fused" and c.threads == t), None)
        for c in cells:
            if c.threads != t or c.who == "fma":
                continue
            mode = "" if c.who == "sgemm" else c.variant[-3:]
            name = c.who + (" 1024²" if c.who == "sgemm" else "")
            if c.error or not c.ms:
                print("%2d %-4s %-18s  skipped: %s" % (t, mode, name, c.error or "no samples"))
                continue
            ms = c.median_ms()
            g = (2 * 1024 ** 3 / 1e9 if c.who == "sgemm" else gf) / ms * 1e3
            pk = "%.0f%%" % (100 * g / peak) if peak else "-"
            vs = "%.2fx" % (ortf / ms) if ortf and c.who != "sgemm" else ""
            chk = ", ".join("%s %.1e" % kv for kv in (c.check or {}).items()) if c.check else (
                "unchecked (no torch)" if c.who.startswith("attnd") else "")
            print("%2d %-4s %-18s %10.4g %10.4g %9.1f %6s %8s  %s" % (t, mode, name, ms, min(c.ms), g, pk, vs, chk))
            if c.who.startswith("attnd") and c.median_core():
                cm = c.median_core()
                cg = core_gf / cm * 1e3
                print("%2d %-4s %-18s %10.4g %10.4g %9.1f %6s %8s  %s" % (
                    t, mode, "  attention core", cm, min(x for x in c.core_ms if x == x), cg,
                    "%.0f%%" % (100 * cg / peak) if peak else "-", "", "%.0f%% of the pass" % (100 * cm / ms)))
    print("ms = median of every sample, best ms = the fastest; vs ORTf = ORT fused's median (no weights, same "
          "threads) / this median: above 1 is faster than fused ORT. nw1 rows (per-head weights [N,H,L,S]) "
          "are compared with fused ORT without weights: it cannot return them.")
    sys.stdout.flush()
    return res


def print_goals(results, threads_list):
    """The issue's targets, measured in this run: each figure from the medians, then from the fastest
    samples (on a shared machine the second is the better guess of what a quiet one would show)."""
    def cell(r, who, variant, t, stat):
        for c in r["cells"]:
            if c["who"] == who and c["variant"] == variant and c["threads"] == t and c["ms"] and not c["error"]:
                core = [x for x in c["core_ms"] if x == x]
                return stat(c["ms"]), (stat(core) if core else None)
        return None, None

    def both(f):
        a, b = f(statistics.median), f(min)
        return "-" if a is None or b is None else "%s / %s" % (a, b)

    print("\n== against the targets (this run; median / fastest samples)")
    print("%-10s %2s %-4s %16s %12s %12s %14s" % ("shape", "t", "mode", "vs ORTf", "% peak", "core %pk",
                                                 "nw1 cost"))
    for r in results:
        gf, core_gf = r["gflop"], 4 * r["N"] * r["L"] * r["L"] * r["E"] / 1e9
        for who in ("attnd", "attnd avx2"):
            label = r["shape"] + ("" if who == "attnd" else " avx2")
            for t in threads_list:
                peak = r["peak"].get(t)
                for mode in ("nw0", "nw1"):
                    if cell(r, who, mode, t, min)[0] is None:
                        continue

                    def vs(st):
                        o, ms = cell(r, "ORT fused", "fused-nw0", t, st)[0], cell(r, who, mode, t, st)[0]
                        return "%.2fx" % (o / ms) if o and ms else None

                    def pk(st):
                        ms = cell(r, who, mode, t, st)[0]
                        return "%.0f" % (100 * gf / ms * 1e3 / peak) if peak and ms else None

                    def cpk(st):
                        c = cell(r, who, mode, t, st)[1]
                        return "%.0f" % (100 * core_gf / c * 1e3 / peak) if peak and c else None

                    def cost(st):
                        a, b = cell(r, who, "nw0", t, st)[0], cell(r, who, "nw1", t, st)[0]
                        return "%+.0f%%" % (100 * (b / a - 1)) if a and b else None

                    print("%-10s %2d %-4s %16s %12s %12s %14s" % (label, t, mode, both(vs), both(pk), both(cpk),
                                                                 both(cost) if mode == "nw1" else ""))
            if r["shape"] == "XL" and 1 in threads_list and 2 in threads_list:
                print("%s 2 threads / 1 thread speed-up: %s (target 1.85x)" % (label, both(
                    lambda st: "%.2fx" % (cell(r, who, "nw0", 1, st)[0] / cell(r, who, "nw0", 2, st)[0])
                    if cell(r, who, "nw0", 1, st)[0] and cell(r, who, "nw0", 2, st)[0] else None)))
            if r["shape"] == "S" and 1 in threads_list:
                print("%s one thread: %s us per pass (target < 15 us)" % (label, both(
                    lambda st: "%.1f" % (cell(r, who, "nw0", 1, st)[0] * 1e3)
                    if cell(r, who, "nw0", 1, st)[0] else None)))
    print("targets: vs ORTf >= 1.2x on L and XL (no slower on S and M); >= 85% of peak for the pass, "
          ">= 80% for the core; per-head weights <= +10%")


# ------------------------------------------------------------------------------------------------
# make bench-long

def long_bench(args, peers, cpu_isa, out):
    E, H = 1024, 16
    threads = int(args.threads.split(",")[0]) if args.threads else 2
    lens = [int(x) for x in args.lens.split(",")]
    os.makedirs(os.path.join(BUILD, "bench-peers"), exist_ok=True)
    engine_argv = [os.path.join(BUILD, "bench", "bench_engine"), "--serve"]
    ort_argv = ["node", os.path.join(ROOT, "bench", "worker_ort.js"), peers.ort_modules]
    done = []  # (L, cells, {cell: peak RSS MB})
    try:
        for L in lens:
            d = prepare(peers, "long%d" % L, 1, L, E, H, long_mode=True)
            cells, workers, rss = fma_cells([threads], cpu_isa), [], {}
            # one process per contender, so that each one's peak RSS is its own
            wanted = [("attnd", "nw0", "attnd", engine_argv, None)]
            if args.weights and L * L * H <= 1 << 28:  # the engine's default max_elements
                wanted.append(("attnd", "nw1", "attnd nw1", engine_argv, None))
            if "avx512f" in cpu_isa:  # the AVX2 path too, as an AVX2-only CPU runs it
                wanted.append(("attnd avx2", "nw0", "attnd avx2", engine_argv, {"ATTND_ISA": "avx2"}))
            if "ort" not in peers.why:
                wanted.append(("ORT fused", "fused-nw0", "ort", ort_argv, None))
            for who, variant, name, argv, env in wanted:
                w, why = start(name + " long", argv, env)
                c = Cell(who, variant, threads, w)
                if w:
                    workers.append((w, c))
                    try:
                        w.ask("load", d, 1, L, E, H)
                    except RuntimeError as e:
                        c.error = str(e)
                else:
                    c.error = why
                cells.append(c)
            try:
                run_rounds(cells, args.rounds, 1, "L=%d" % L)
            finally:
                for w, c in workers:
                    rss[id(c)] = vm_hwm_mb(w.p.pid)
                    w.close()
            done.append((L, cells, rss))
    finally:
        fma = [c for _, cells, _ in done for c in cells if c.who == "fma"]
        peaks = {threads: peak_of(fma, threads)}
        print_peak(peaks, fma)
        out["peak"] = {threads: peaks[threads][0]}
        out["long"] = [print_long(L, E, H, cells, rss, peaks[threads][0]) for L, cells, rss in done]
        if "ort" in peers.why:
            print("ONNX Runtime: skipped: %s" % peers.why["ort"])
        print("ms = median, best ms = fastest pass; vs ORTf = fused ORT's median / this median (above 1: faster "
              "than fused ORT; nw1 is compared with fused ORT without weights, which it cannot return); peak RSS "
              "= VmHWM of the contender's own process (attnd: weights 16 MB, x and output 4·L·E bytes each, "
              "nw1's weights output 4·H·L·S); scratch = the engine's planned workspace for one thread. Checked: "
              "64 rows spread over the sequence, against a float64 torch reference.")


def print_long(L, E, H, cells, rss, peak):
    gf = gflop(1, L, E)
    first = not hasattr(print_long, "header")
    if first:
        print_long.header = True
        print("\nN=1, E=%d, H=%d, self-attention, %d threads; each length and contender in a fresh process, "
              "interleaved" % (E, H, cells[0].threads))
        print("%6s %-15s %10s %10s %9s %6s %8s %10s %10s  %s" % (
            "L=S", "contender", "ms", "best ms", "GFLOP/s", "%peak", "vs ORTf", "peak RSS", "scratch", "check"))
    ortf = next((c.median_ms() for c in cells if c.who == "ORT fused"), None)
    for c in cells:
        if c.who == "fma":
            continue
        name = c.who + " " + c.variant[-3:]
        if c.error or not c.ms:
            print("%6d %-15s  skipped: %s" % (L, name, c.error or "no samples"))
            continue
        ms = c.median_ms()
        g = gf / ms * 1e3
        scratch = "%.0f MB" % (c.extra["workspace_bytes"] / 2 ** 20) if "workspace_bytes" in c.extra else ""
        print("%6d %-15s %10.1f %10.1f %9.1f %6s %8s %7.0f MB %10s  %s" % (
            L, name, ms, min(c.ms), g, fmt(peak and 100 * g / peak, ".0f", "-") + "%",
            "%.2fx" % (ortf / ms) if ortf else "", rss.get(id(c), float("nan")), scratch,
            ", ".join("%s %.1e" % kv for kv in (c.check or {}).items()) or "unchecked"))
        if c.who.startswith("attnd") and c.median_core():
            cg = 4 * L * L * E / 1e9 / c.median_core() * 1e3
            print("%6s %-15s %10.1f %10.1f %9.1f %6s" % ("", "  core", c.median_core(),
                                                         min(x for x in c.core_ms if x == x), cg,
                                                         fmt(peak and 100 * cg / peak, ".0f", "-") + "%"))
    sys.stdout.flush()
    return {"L": L, "gflop": gf, "peak": peak, "cells": [c.json() for c in cells],
            "rss_mb": {c.who + " " + c.variant: rss.get(id(c)) for c in cells if c.who != "fma"}}


def blas_fix():
    """An OpenBLAS that does not know this CPU's model runs an older core's kernels (Debian 12's 0.3.21
    takes an Emerald Rapids Xeon for a Prescott: SSE3). torch and the sgemm anchor then run as no user
    who set OPENBLAS_CORETYPE would: set it for every contender, and say so. An operator's own
    setting is kept."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return
    try:
        fix = subprocess.run([os.path.join(BUILD, "bench", "bench_engine"), "--core-fix"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return
    if fix:
        os.environ["OPENBLAS_CORETYPE"] = fix
        print("OpenBLAS does not know this CPU and fell back to an older core by itself: "
              "OPENBLAS_CORETYPE=%s set for every contender (torch, the sgemm anchor, attnd's generic path)" % fix)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="S,M,L,XL")
    ap.add_argument("--threads", default=None, help="thread counts (default 1,2; --long: 2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=3, help="samples per cell per round")
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--lens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--no-weights", dest="weights", action="store_false",
                    help="--long: skip the per-head weights rows")
    ap.add_argument("--json", default=None, help="where to write every sample (default build/bench-results/)")
    args = ap.parse_args()
    if args.threads is None:
        args.threads = "2" if args.long else "1,2"
    name, cpu = cpu_info()
    print("CPU: " + name)
    blas_fix()
    peers = Peers()
    out = {"cpu": cpu, "date": time.strftime("%Y-%m-%d %H:%M"), "peers_skipped": peers.why}
    json_path = args.json or os.path.join(BUILD, "bench-results", "long.json" if args.long else "compare.json")
    try:
        (long_bench if args.long else short_bench)(args, peers, cpu["isa"], out)
    finally:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        json.dump(out, open(json_path, "w"), indent=1)
        print("\nevery sample: %s" % os.path.relpath(json_path, ROOT))


if __name__ == "__main__":
    main()
