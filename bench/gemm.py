"""The GEMMs of the training-step benchmarks: numpy's OpenBLAS, oarlock-cpu's MKL path and PyTorch.

Shapes (m x k x n, batch): the MLP's 784 -> 256 layer (forward, and its weight gradient as x^T g), the GPT's
projections over 16 x 128 tokens (q/k/v 128 -> 384, MLP 128 -> 512 and back), and its attention scores per
head (64 heads of 128 x 32 x 128). Each library runs in its own process (its own thread pool), on all cores
(oarlock: the BLAS thread policy's count). Two oarlock MKL workers: "mkl split", the default, where a product the
policy gives several threads is cut into pieces MKL runs on one thread each on oarlock_cpu's own worker pool, and
"mkl omp" (OARLOCK_CPU_MKL=threads), where MKL's own OpenMP team runs it; see oarlock_cpu.mkl. Median of --repeat
timings of enough calls to take ~0.1 s.
Prints microseconds per product and GFLOP/s, and each library's time over PyTorch's.

    python bench/gemm.py [--repeat 7] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = [  # (label, m, k, n, batch, transpose a)
    ("MLP fc1 forward", 64, 784, 256, 1, False),
    ("MLP fc1 weight grad (x^T g)", 784, 64, 256, 1, True),
    ("GPT qkv 2048x128x384", 2048, 128, 384, 1, False),
    ("GPT mlp up 2048x128x512", 2048, 128, 512, 1, False),
    ("GPT mlp down 2048x512x128", 2048, 512, 128, 1, False),
    ("GPT attention scores 64 x 128x32x128", 128, 32, 128, 64, False),
]
LIBRARIES = ("openblas", "mkl split", "mkl omp", "torch")
MKL_MODE = {"mkl split": "split", "mkl omp": "threads"}   # OARLOCK_CPU_MKL of each MKL worker


def worker(library: str, repeat: int, threads: int | None) -> dict:
    import numpy as np
    rng = np.random.default_rng(0)
    if library == "torch":
        import torch
        torch.set_num_threads(threads or os.cpu_count())
        product = torch.matmul
        convert = torch.from_numpy
    else:
        from oarlock_cpu import mkl
        if library in MKL_MODE and mkl.LIBRARY is None:
            return {"error": "MKL is not available (the mkl wheel is not installed)"}
        product = mkl.matmul if library in MKL_MODE else np.matmul
        convert = lambda a: a   # noqa: E731
        if library == "openblas":   # the OpenBLAS thread count the cpu kernels would set
            from oarlock_cpu import blas
            blas.policy().apply(2048, 128, 512)
    results = {}
    for label, m, k, n, batch, transpose_a in SHAPES:
        a = rng.standard_normal((batch, k, m) if transpose_a else (batch, m, k)).astype(np.float32)
        a = a.swapaxes(-1, -2) if transpose_a else a
        b = rng.standard_normal((batch, k, n)).astype(np.float32)
        if batch == 1:
            a, b = a[0], b[0]
        a, b = convert(a), convert(b)
        calls = max(3, int(0.1 / (2 * m * k * n * batch / 50e9)))
        for _ in range(3):
            product(a, b)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(calls):
                product(a, b)
            times.append((time.perf_counter() - start) / calls)
        results[label] = statistics.median(times)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timings per shape (median taken)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for every library (default: all cores; oarlock via OARLOCK_BLAS_THREADS)")
    parser.add_argument("--worker", choices=LIBRARIES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat, args.threads)))
        return
    env = dict(os.environ)
    if args.threads:
        env["OARLOCK_BLAS_THREADS"] = str(args.threads)
    runs = {}
    for library in LIBRARIES:
        worker_env = {**env, "OARLOCK_CPU_MKL": MKL_MODE[library]} if library in MKL_MODE else env
        out = subprocess.run([sys.executable, __file__, "--worker", library, "--repeat", str(args.repeat)]
                             + (["--threads", str(args.threads)] if args.threads else []),
                             env=worker_env, capture_output=True, text=True, check=True).stdout
        runs[library] = json.loads(out.strip().splitlines()[-1])
    errors = {run["error"] for run in runs.values() if "error" in run}
    if errors:
        print(*errors)
        return
    others = LIBRARIES[:-1]
    print(f"{'product':40s} " + " ".join(f"{lib + ' us':>13s}" for lib in LIBRARIES) + "  "
          + " ".join(f"{lib + '/torch':>15s}" for lib in others) + "  split GFLOP/s")
    for label, m, k, n, batch, _ in SHAPES:
        us = {lib: runs[lib][label] * 1e6 for lib in LIBRARIES}
        flops = 2 * m * k * n * batch
        print(f"{label:40s} " + " ".join(f"{us[lib]:13.1f}" for lib in LIBRARIES) + "  "
              + " ".join(f"{us[lib] / us['torch']:14.2f}x" for lib in others)
              + f"  {flops / us['mkl split'] / 1e3:13.1f}")


if __name__ == "__main__":
    main()
