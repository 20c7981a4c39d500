"""GEMM throughput with a fixed BLAS thread count against oarlock-cpu's adaptive policy, idle and under load.

    python bench/blas_threads.py [--seconds 0.4] [--rounds 5]

Shapes: 512^3 (large), 64^3 (small), [4096, 512] @ [512, 8] (skinny), float32, through oarlock.matmul (so
every mode pays the same dispatch). Modes: 1 thread, all cores (fixed through the policy's forced count),
and the adaptive policy (oarlock_cpu.blas). Conditions: idle, and with one competing busy process (a
`while True: pass` subprocess). Each (shape, mode) is timed in blocks of --seconds, the modes interleaved,
over --rounds rounds; the table gives the median GFLOP/s and the ratio to the best fixed mode of the row's
condition.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

SHAPES = {"512^3": ((512, 512), (512, 512)), "64^3": ((64, 64), (64, 64)), "skinny 4096x512x8": ((4096, 512), (512, 8))}


def gflops(matmul, a, b, seconds):
    flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
    matmul(a, b)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        matmul(a, b)
        calls += 1
    return calls * flops / elapsed / 1e9


def measure(args, modes, oarlock, blas):
    results = {}
    for shape_name, (sa, sb) in SHAPES.items():
        a, b = oarlock.randn(list(sa)), oarlock.randn(list(sb))
        samples = {mode: [] for mode in modes}
        for _ in range(args.rounds):
            for mode, make in modes.items():
                blas.set_policy(make())
                if mode == "adaptive":  # let it see the load (a sample needs an interval)
                    gflops(oarlock.matmul, a, b, 0.25)
                samples[mode].append(gflops(oarlock.matmul, a, b, args.seconds))
        results[shape_name] = {mode: statistics.median(v) for mode, v in samples.items()}
    blas.set_policy(None)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import oarlock
    from oarlock_cpu import blas

    cores = blas.ThreadPolicy().cores
    modes = {"1 thread": lambda: blas.ThreadPolicy(forced=1),
             f"{cores} threads": lambda: blas.ThreadPolicy(forced=cores),
             "adaptive": lambda: blas.ThreadPolicy(adaptive=True)}
    if not blas.ThreadPolicy().library.available:
        print("no OpenBLAS found among the loaded libraries: every mode runs with the library's own count")
    table = {}
    table["idle"] = measure(args, modes, oarlock, blas)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        table["1 busy process"] = measure(args, modes, oarlock, blas)
    finally:
        busy.kill()
        busy.wait()

    names = list(modes)
    print(f"\nGFLOP/s, float32 oarlock.matmul, {cores} usable cores (ratio: / best fixed mode of the row)")
    print(f"| condition | shape | {' | '.join(names)} | adaptive / best fixed |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for condition, rows in table.items():
        for shape, r in rows.items():
            best_fixed = max(r[m] for m in names if m != "adaptive")
            cells = " | ".join(f"{r[m]:.1f} ({r[m] / best_fixed:.2f}x)" for m in names)
            print(f"| {condition} | {shape} | {cells} | {r['adaptive'] / best_fixed:.2f}x |")


if __name__ == "__main__":
    main()
