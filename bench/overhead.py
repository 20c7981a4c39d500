"""Per-op overhead: `a + b` on 8x8 float32, grad off and grad on, against numpy, PyTorch and Paddle.

"grad off": the inputs do not require gradients (no graph is recorded).
"grad on": the inputs require gradients, so every call records a graph node.
Every framework is timed in the same run; the table gives medians of
--repeat timings of --number calls each, and ratios against numpy and PyTorch.

    python bench/overhead.py [--number 20000] [--repeat 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit

import numpy as np


def median_us(fn, number, repeat):
    fn()  # warm caches (kernel lookup, fast path)
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def off_and_on(a, b, require_grad, number, repeat):
    """Time a + b with inputs that need no gradient, then again after require_grad(t) on both."""
    off = median_us(lambda: a + b, number, repeat)
    require_grad(a)
    require_grad(b)
    return off, median_us(lambda: a + b, number, repeat)


def bench_oarlock(a_np, b_np, number, repeat):
    import oarlock

    def require_grad(t):
        t.stop_gradient = False
    return off_and_on(oarlock.to_tensor(a_np), oarlock.to_tensor(b_np), require_grad, number, repeat)


def bench_torch(a_np, b_np, number, repeat):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return off_and_on(torch.from_numpy(a_np.copy()), torch.from_numpy(b_np.copy()),
                      lambda t: t.requires_grad_(True), number, repeat)


def bench_paddle(a_np, b_np, number, repeat):
    try:
        import paddle
    except ImportError:
        return None
    paddle.set_device("cpu")

    def require_grad(t):
        t.stop_gradient = False
    return off_and_on(paddle.to_tensor(a_np), paddle.to_tensor(b_np), require_grad, number, repeat)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timing (default 20000)")
    parser.add_argument("--repeat", type=int, default=7, help="timings per figure; the median is shown (default 7)")
    parser.add_argument("--no-paddle", action="store_true", help="skip Paddle (its import takes seconds)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((8, 8)).astype(np.float32)
    b_np = rng.standard_normal((8, 8)).astype(np.float32)
    results = {"numpy": (median_us(lambda: a_np + b_np, args.number, args.repeat), None)}
    results["oarlock"] = bench_oarlock(a_np, b_np, args.number, args.repeat)
    results["torch"] = bench_torch(a_np, b_np, args.number, args.repeat)
    if not args.no_paddle:
        results["paddle"] = bench_paddle(a_np, b_np, args.number, args.repeat)

    numpy_us = results["numpy"][0]
    torch_res = results.get("torch")
    print(f"a + b, 8x8 float32, median of {args.repeat} x {args.number} calls (us per op)")
    print(f"{'framework':<10} {'grad off':>9} {'grad on':>9} {'off/numpy':>10} {'off/torch':>10} {'on/torch':>9}")
    for name, res in results.items():
        if res is None:
            print(f"{name:<10} {'not installed':>9}")
            continue
        off, on = res
        vs_torch_off = f"{off / torch_res[0]:.2f}x" if torch_res else "-"
        vs_torch_on = f"{on / torch_res[1]:.2f}x" if torch_res and on is not None else "-"
        on_text = f"{on:.2f}" if on is not None else "-"
        print(f"{name:<10} {off:>9.2f} {on_text:>9} {off / numpy_us:>9.2f}x {vs_torch_off:>10} {vs_torch_on:>9}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
