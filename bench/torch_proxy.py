"""Torch proxy overhead: a call made by torch code through the façade against the same computation called on
oarlock directly, in the same run (medians of --repeat timings of --number calls each; small tensors, so the
per-call cost dominates). "torch code" runs with the proxy's builtins, exactly as a module imported through
the proxy does, so the Tensor methods that resolve torch/Paddle meanings by caller take their torch branch.
Real PyTorch doing the same call is printed as a third column when it is installed.

    python bench/torch_proxy.py [--number 20000] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit

import numpy as np

# each case: name, the torch-code statement (names: torch, x, y, w, lin), the oarlock statement (names: oarlock,
# F, x, y, w, lin_o, wt)
CASES = [
    ("a + b (same object: no façade code)", "x + y", "x + y"),
    ("torch.matmul (forwarded name)", "torch.matmul(x, y)", "oarlock.matmul(x, y)"),
    ("x.shape (torch.Size for torch code)", "x.shape", "x.shape"),
    ("x.size(-1)", "x.size(-1)", "x.shape[-1]"),
    ("x.max(1) -> (values, indices)", "x.max(1)", "(oarlock.max(x, 1), oarlock.argmax(x, 1))"),
    ("x.view(-1, 8)", "x.view(-1, 8)", "x.reshape([-1, 8])"),
    ("torch.zeros(8, 8)", "torch.zeros(8, 8)", "oarlock.zeros([8, 8])"),
    ("F.linear (weight [out, in])", "torch.nn.functional.linear(x, w)", "oarlock.matmul(x, w, transpose_y=True)"),
    ("nn.Linear forward", "lin(x)", "lin_o(x)"),
    ("F.softmax(dim=-1)", "torch.nn.functional.softmax(x, dim=-1)", "F.softmax(x, axis=-1)"),
]


def median_us(fn, number, repeat):
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()

    import oarlock
    import oarlock_torch_proxy.facade as facade
    from oarlock_torch_proxy.hook import PROXY_BUILTINS

    rng = np.random.default_rng(0)
    x_np, y_np, w_np = (rng.standard_normal((8, 8)).astype("float32") for _ in range(3))
    x, y, w = oarlock.to_tensor(x_np), oarlock.to_tensor(y_np), oarlock.to_tensor(w_np)
    lin, lin_o = facade.nn.Linear(8, 8), oarlock.nn.Linear(8, 8)
    torch_globals = {"__builtins__": PROXY_BUILTINS, "__name__": "torch_code", "torch": facade, "x": x, "y": y,
                     "w": w, "lin": lin}
    oarlock_globals = {"oarlock": oarlock, "F": oarlock.nn.functional, "x": x, "y": y, "w": w, "lin_o": lin_o}
    try:
        import torch
        torch.set_num_threads(1)
        real_globals = {"torch": torch, "x": torch.tensor(x_np), "y": torch.tensor(y_np), "w": torch.tensor(w_np),
                        "lin": torch.nn.Linear(8, 8)}
    except ImportError:
        real_globals = None

    rows = []
    print(f"{'call':42s} {'facade us':>10s} {'oarlock us':>11s} {'ratio':>6s} {'torch us':>9s}")
    for name, torch_stmt, oarlock_stmt in CASES:
        facade_fn = eval(compile(f"lambda: {torch_stmt}", "<torch code>", "eval"), torch_globals)
        oarlock_fn = eval(compile(f"lambda: {oarlock_stmt}", "<oarlock code>", "eval"), oarlock_globals)
        t_facade = median_us(facade_fn, args.number, args.repeat)
        t_oarlock = median_us(oarlock_fn, args.number, args.repeat)
        t_torch = None
        if real_globals is not None:
            t_torch = median_us(eval(compile(f"lambda: {torch_stmt}", "<real torch>", "eval"), real_globals),
                                args.number, args.repeat)
        rows.append({"call": name, "facade_us": t_facade, "oarlock_us": t_oarlock, "ratio": t_facade / t_oarlock,
                     "torch_us": t_torch})
        print(f"{name:42s} {t_facade:10.2f} {t_oarlock:11.2f} {t_facade / t_oarlock:6.2f} "
              f"{'' if t_torch is None else f'{t_torch:9.2f}'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
