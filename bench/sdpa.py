"""scaled_dot_product_attention on the CPU: oarlock's kernels against PyTorch's, forward and forward+backward.

    python bench/sdpa.py [--old REV] [--threads 1] [--repeat 30] [--only gpt,gqa,rotary]

For each case (Paddle's [batch, seq, heads, head_dim] layout; the GPT of `oarlock train` first): oarlock's
forward kernel and forward + fused backward kernel (called directly with numpy, as the cpu device runs them: no
dispatcher, no graph), torch's F.scaled_dot_product_attention forward and forward + autograd backward on
[batch, heads, seq, head_dim] tensors, and with --old REV the kernels of plugins/ops/src/oarlock_ops/attention.py
at that git revision. Everything runs interleaved in one process, in --repeat rounds that time every contender
once, back to back, so load from other processes hits all of them alike. Times are the best of the rounds;
ratios (torch / new and old / new, above 1: the new kernel is faster) are the medians over rounds of the same
round's ratio, which cancels the load's slow swings. Both libraries get --threads threads (OpenBLAS's count
through oarlock-cpu, torch's intra-op pool): on a shared 2-core machine one thread is the fair and the stable
comparison, timed by the thread's CPU time (the wall clock with more threads). Last, the same for the kernel of
fused_rotary_embedding (case "rotary").
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "plugins/ops/src/oarlock_ops/attention.py"
ROTARY = "plugins/ops/src/oarlock_ops/rotary.py"

# name: (batch, seq, heads_q, heads_k, head_dim, keywords); mask and dropout cases add their inputs below
CASES = {
    "gpt": (16, 128, 4, 4, 32, {"is_causal": True}),
    "s64_d64": (32, 64, 8, 8, 64, {"is_causal": True}),
    "s256_d64": (4, 256, 8, 8, 64, {"is_causal": True}),
    "s512_d128": (1, 512, 8, 8, 128, {"is_causal": True}),
    "s512_d32": (2, 512, 8, 8, 32, {"is_causal": True}),
    "noncausal": (16, 128, 4, 4, 32, {}),
    "gqa": (8, 256, 8, 2, 64, {"is_causal": True}),
    "bool_mask": (16, 128, 4, 4, 32, {"mask": "bool"}),
    "causal_float_mask": (16, 128, 4, 4, 32, {"is_causal": True, "mask": "float"}),
    "dropout": (16, 128, 4, 4, 32, {"is_causal": True, "dropout_p": 0.1}),
}


def paired(runners, repeat, clock):
    """{name: [forward samples, forward+backward samples]}: `repeat` rounds, each timing every contender's
    calls once, back to back, so the per-round ratios compare calls made under the same load."""
    for fns in runners.values():  # warm-up
        for fn in fns:
            fn()
    samples = {key: [[], []] for key in runners}
    for _ in range(repeat):
        for key, fns in runners.items():
            for i, fn in enumerate(fns):
                start = clock()
                fn()
                samples[key][i].append(clock() - start)
    return samples


def ratio(samples, key, base, i):
    """The median over rounds of samples[key] / samples[base] (the same round's calls)."""
    return statistics.median(a / b for a, b in zip(samples[key][i], samples[base][i]))


def load_old(rev, path=KERNEL):
    """The module at `path` in revision `rev`, imported under another name."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout
    spec = importlib.util.spec_from_loader("_old_" + Path(path).stem, loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(text, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def rotary_table(torch, old_rev, repeat, clock):
    """fused_rotary_embedding's kernel (rotation and transpose) on the GPT's [16, 128, 8, 32] with [1, 128, 1,
    32] tables, against torch's x * cos + rotate_half(x) * sin and the kernel of --old."""
    from oarlock_ops import rotary as new
    old = load_old(old_rev, ROTARY) if old_rev else None
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 128, 8, 32)).astype(np.float32)
    angles = rng.random((1, 128, 1, 16)).astype(np.float32)
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)
    sin = np.concatenate([-np.sin(angles), np.sin(angles)], axis=-1)
    print(f"\nfused_rotary_embedding, x {list(x.shape)}, tables {list(cos.shape)}")
    print(f"{'case':18} {'new':>8} {'torch':>8} {'t/n':>7}" + (f" {'old':>8} {'o/n':>7}" if old else ""))
    tx, tcos, tsin = (torch.tensor(a) for a in (x, cos, sin)) if torch else (None,) * 3

    def torch_rotary(transpose):
        def half(t):
            return torch.cat([t[..., 16:], t[..., :16]], dim=-1)
        return lambda: tx * tcos + (half(tx * tsin) if transpose else half(tx) * tsin)

    for transpose in (False, True):
        runners = {"new": [lambda t=transpose: new._rotary(np, x, cos, sin, transpose=t)]}
        if torch:
            runners["torch"] = [torch_rotary(transpose)]
        if old:
            runners["old"] = [lambda t=transpose: old._rotary(np, x, cos, sin, transpose=t)]
        samples = paired(runners, repeat, clock)
        ms = {key: min(pair[0]) * 1e3 for key, pair in samples.items()}
        line = f"{'transpose' if transpose else 'rotate':18} {ms['new']:8.3f}"
        line += f" {ms['torch']:8.3f} {ratio(samples, 'torch', 'new', 0):7.2f}" if torch else f" {'':8} {'':7}"
        if old:
            line += f" {ms['old']:8.3f} {ratio(samples, 'old', 'new', 0):7.2f}"
        print(line, flush=True)


def make_inputs(rng, b, s, hq, hk, d, kw):
    q = rng.standard_normal((b, s, hq, d)).astype(np.float32)
    k, v = (rng.standard_normal((b, s, hk, d)).astype(np.float32) for _ in range(2))
    g = rng.standard_normal((b, s, hq, d)).astype(np.float32)
    mask = None
    if kw.get("mask") == "bool":  # a padding mask per batch row, as a tokenizer would give
        lengths = rng.integers(s // 2, s + 1, size=b)
        mask = (np.arange(s)[None, :] < lengths[:, None])[:, None, None, :].repeat(s, axis=2)
    elif kw.get("mask") == "float":
        mask = rng.standard_normal((1, 1, s, s)).astype(np.float32)
    return q, k, v, g, mask


def oarlock_runner(module, q, k, v, g, mask, kw):
    """(forward, forward + backward) closures over a module's _sdpa/_sdpa_backward."""
    gen = np.random.default_rng(1)
    args = dict(attn_mask=mask, dropout_p=kw.get("dropout_p", 0.0), is_causal=kw.get("is_causal", False))
    causal_arg = "is_causal" in inspect.signature(module._sdpa_backward).parameters

    def forward():
        return module._sdpa(np, q, k, v, generator=gen, **args)

    def both():
        out, p, keep = forward()
        extra = {"is_causal": args["is_causal"]} if causal_arg else {}
        return module._sdpa_backward(np, g, q, k, v, out, p, keep, args["dropout_p"], **extra)
    return forward, both


def torch_runner(torch, q, k, v, g, mask, kw):
    tq, tk, tv = (torch.tensor(x).transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
    tg = torch.tensor(g).transpose(1, 2).contiguous()
    tmask = None if mask is None else torch.tensor(mask)
    if tmask is not None and kw.get("is_causal"):  # torch refuses a mask with is_causal: combine them
        causal = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril()
        tmask = tmask.masked_fill(~causal, float("-inf")) if tmask.dtype != torch.bool else tmask & causal
        causal_flag = False
    else:
        causal_flag = kw.get("is_causal", False)
    call = dict(attn_mask=tmask, dropout_p=kw.get("dropout_p", 0.0), is_causal=causal_flag,
                enable_gqa=q.shape[2] != k.shape[2])

    def forward():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **call)

    def both():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **call)
        return torch.autograd.grad(out, (tq, tk, tv), tg)
    return forward, both


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", help="git revision whose attention kernels to time too")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--only", help="comma-separated case names")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "bench"))
    from _checkout import bootstrap
    bootstrap()
    import oarlock  # noqa: F401  (loads the plugins)
    from oarlock_cpu.blas import BlasLibrary
    from oarlock_ops import attention as new
    BlasLibrary().set_threads(args.threads)
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    old = load_old(args.old) if args.old else None
    # one thread: all the work is on this thread, and its CPU time does not count the time another process
    # held the core (the wall clock does); with more threads only the wall clock sees the helpers' work
    clock = time.thread_time if args.threads == 1 else time.perf_counter

    print(f"threads {args.threads}, best of {args.repeat}; times in ms; ratios above 1: the new kernel is faster")
    cases = {name: case for name, case in CASES.items() if not args.only or name in args.only.split(",")}
    head = f"{'case':18} {'shape b,s,hq,hk,d':18} {'new fwd':>8} {'new f+b':>8}"
    if torch:
        head += f" {'torch fwd':>9} {'torch f+b':>9} {'t/n fwd':>7} {'t/n f+b':>7}"
    if old:
        head += f" {'old fwd':>8} {'old f+b':>8} {'o/n f+b':>7}"
    if cases:
        print(head)
    rng = np.random.default_rng(0)
    for name, (b, s, hq, hk, d, kw) in cases.items():
        q, k, v, g, mask = make_inputs(rng, b, s, hq, hk, d, kw)
        runners = {"new": oarlock_runner(new, q, k, v, g, mask, kw)}
        if torch:
            runners["torch"] = torch_runner(torch, q, k, v, g, mask, kw)
        if old:
            runners["old"] = oarlock_runner(old, q, k, v, g, mask, kw)
        samples = paired(runners, args.repeat, clock)
        ms = {key: [min(s) * 1e3 for s in pair] for key, pair in samples.items()}
        line = f"{name:18} {f'{b},{s},{hq},{hk},{d}':18} {ms['new'][0]:8.2f} {ms['new'][1]:8.2f}"
        if torch:
            line += (f" {ms['torch'][0]:9.2f} {ms['torch'][1]:9.2f} {ratio(samples, 'torch', 'new', 0):7.2f}"
                     f" {ratio(samples, 'torch', 'new', 1):7.2f}")
        if old:
            line += f" {ms['old'][0]:8.2f} {ms['old'][1]:8.2f} {ratio(samples, 'old', 'new', 1):7.2f}"
        print(line, flush=True)
    if not args.only or "rotary" in args.only.split(","):
        rotary_table(torch, args.old, args.repeat, clock)


if __name__ == "__main__":
    main()
