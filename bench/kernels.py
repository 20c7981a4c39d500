"""Time per element of oarlock-cpu's C kernels against the generic numpy kernels they replace and PyTorch.

    python bench/kernels.py [--sizes 4096 262144 4194304] [--repeat 15]
    python bench/kernels.py --norms [--rows 2048 512] [--repeat 15]

For erf, exact GELU forward and backward, sigmoid, SiLU and its backward, in float32 and float64, at each
size: the best of --repeat timings (each call writes a fresh output array, as an op does) of
oarlock_cpu._kernels, of the generic kernel from oarlock-ops (what the "cpu" device ran before), and of
torch (one thread: torch.erf, F.gelu and its backward, torch.sigmoid, F.silu and its backward); ratios
are generic / C and torch / C (above 1: the C kernel is faster). All three run interleaved in one process.

--norms: per-call times of rms_norm and layer_norm, forward and backward (the `_normalize_grad` op, from the
saved statistics), on [rows, 128] float32 (2048 rows: the GPT of `oarlock train`, 512: bench's tfm):
oarlock_cpu.rows against the generic kernels and torch (its backward timed alone, retain_graph=True).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def best(fn, repeat, min_time=0.02):
    """Best time of one call, from `repeat` batches of enough calls to take min_time each."""
    fn()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < min_time / 4:
        fn()
        calls += 1
    calls = max(1, calls * 4)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return min(times)


def cases(torch):
    import oarlock  # noqa: F401  (loads the plugins)
    from oarlock_cpu import _kernels as c
    from oarlock_cpu.kernels import generic

    F = torch.nn.functional if torch else None

    def torch_backward(fn):
        def run(tx, tg):  # d(sum(fn(x) * g))/dx
            tx = tx.detach().requires_grad_()
            return torch.autograd.grad(fn(tx), tx, tg)
        return run

    return [  # name, C, generic, torch, binary
        ("erf", c.erf, lambda x: generic("erf")(np, x), torch and (lambda tx: torch.erf(tx)), False),
        ("gelu", c.gelu, lambda x: generic("gelu")(np, x), torch and (lambda tx: F.gelu(tx)), False),
        ("gelu_grad", c.gelu_grad, lambda x, g: generic("gelu_grad")(np, x, g),
         torch and torch_backward(F.gelu), True),
        ("sigmoid", c.sigmoid, lambda x: generic("sigmoid")(np, x), torch and (lambda tx: torch.sigmoid(tx)), False),
        ("silu", c.silu, lambda x: generic("silu")(np, x), torch and (lambda tx: F.silu(tx)), False),
        ("silu_grad", c.silu_grad, lambda x, g: generic("silu_grad")(np, x, g),
         torch and torch_backward(F.silu), True),
    ]


def norm_cases(torch, rows, width=128, dtype=np.float32):
    """(name, ours, generic, torch) per-call closures for the norms on one [rows, width] input."""
    import oarlock  # noqa: F401  (loads the plugins)
    from oarlock_cpu import rows as fused
    from oarlock_cpu.kernels import generic

    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal((rows, width)).astype(dtype) for _ in range(2))
    w, b = (rng.standard_normal(width).astype(dtype) for _ in range(2))
    _, mean, rstd = fused.layer_norm(np, x, w, b, normalized_shape=(width,), epsilon=1e-5)
    _, rrstd = fused.rms_norm(np, x, w, normalized_shape=(width,), eps=1e-6)
    plan = dict(view=(rows, width), stats=(1,), affine=(1, width))
    out = [
        ("rms_norm", lambda k: k(np, x, w, normalized_shape=(width,), eps=1e-6), "rms_norm"),
        ("rms_norm_grad", lambda k: k(np, x, w, g, None, rrstd, **plan, bias=False), "_normalize_grad"),
        ("layer_norm", lambda k: k(np, x, w, b, normalized_shape=(width,), epsilon=1e-5), "layer_norm"),
        ("layer_norm_grad", lambda k: k(np, x, w, g, mean, rstd, **plan, bias=True), "_normalize_grad"),
    ]
    F = torch.nn.functional if torch is not None else None
    cases = []
    for name, call, op in out:
        ours, theirs = fused.KERNELS[op], generic(op)
        torch_fn = None
        if torch is not None:
            tx, tw, tb, tg = (torch.from_numpy(a).requires_grad_() for a in (x, w, b, g))
            if name.startswith("rms"):
                fwd = lambda tx=tx, tw=tw: F.rms_norm(tx, (width,), tw, 1e-6)  # noqa: E731
                grad_of = (tx, tw)
            else:
                fwd = lambda tx=tx, tw=tw, tb=tb: F.layer_norm(tx, (width,), tw, tb, 1e-5)  # noqa: E731
                grad_of = (tx, tw, tb)
            if name.endswith("_grad"):
                y = fwd()
                torch_fn = lambda y=y, grad_of=grad_of, tg=tg: torch.autograd.grad(  # noqa: E731
                    y, grad_of, tg.detach(), retain_graph=True)
            else:
                torch_fn = torch.no_grad()(fwd)
        cases.append((name, lambda call=call, k=ours: call(k), lambda call=call, k=theirs: call(k), torch_fn))
    return cases


def norms(torch, row_counts, repeat):
    for rows in row_counts:
        for name, ours, theirs, torch_fn in norm_cases(torch, rows):
            t_c, t_gen = best(ours, repeat), best(theirs, repeat)
            t_torch = best(torch_fn, repeat) if torch_fn else None
            torch_part = f"torch {t_torch * 1e6:8.1f} us  torch/C {t_torch / t_c:5.2f}x" if t_torch else "(no torch)"
            print(f"{name:16s} [{rows}, 128] float32  C {t_c * 1e6:8.1f} us  generic {t_gen * 1e6:8.1f} us  "
                  f"generic/C {t_gen / t_c:5.2f}x  {torch_part}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 262144, 4194304])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--norms", action="store_true", help="time the RMSNorm / LayerNorm row kernels instead")
    parser.add_argument("--rows", type=int, nargs="+", default=[2048, 512], help="row counts for --norms")
    args = parser.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    if args.norms:
        norms(torch, args.rows, args.repeat)
        return
    rows = []
    for name, ours, theirs, torch_fn, binary in cases(torch):
        for dtype in (np.float32, np.float64):
            for n in args.sizes:
                rng = np.random.default_rng(0)
                x = (rng.standard_normal(n) * 2).astype(dtype)
                g = rng.standard_normal(n).astype(dtype)
                t_c, t_gen, t_torch = time_case(ours, theirs, torch_fn and torch, torch_fn, binary, x, g, args.repeat)
                rows.append((name, dtype.__name__, n, t_c, t_gen, t_torch))
                print(_row(rows[-1]), flush=True)


def time_case(ours, theirs, torch, torch_fn, binary, x, g, repeat):
    operands = (x, g) if binary else (x,)
    t_c = best(lambda: ours(*operands), repeat)
    t_gen = best(lambda: theirs(*operands), repeat)
    t_torch = None
    if torch is not None:
        tensors = (torch.from_numpy(x), torch.from_numpy(g)) if binary else (torch.from_numpy(x),)
        t_torch = best(lambda: torch_fn(*tensors), repeat)
    return t_c, t_gen, t_torch


def _row(row):
    name, dtype, n, t_c, t_gen, t_torch = row
    ns = 1e9 / n
    torch_part = f"{t_torch * ns:8.2f} ns  torch/C {t_torch / t_c:6.2f}x" if t_torch else "   (no torch)"
    return (f"{name:10s} {dtype:8s} {n:>8d}  C {t_c * ns:7.2f} ns  generic {t_gen * ns:7.2f} ns  "
            f"generic/C {t_gen / t_c:6.2f}x  torch {torch_part}")


if __name__ == "__main__":
    main()
