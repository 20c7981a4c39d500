"""FlashMask attention on the GPU: oarlock's fused CUDA kernels against PyTorch FlexAttention and SDPA, in one run.

Runs on the device machine (one GPU, python3 with torch, triton and cupy; oarlock from the repository through
PYTHONPATH or, failing that, from this checkout's core/src and plugins/*/src):

1. build: the "flashmask" kernel family compiled with NVRTC (cupy.RawModule), with each kernel's registers,
   local memory and shared memory as the driver reports them;
2. correctness first, on fresh random inputs at --check-seq (2048) and the timing's B, H, D: out and lse (and
   dq, dk, dv unless --no-backward) of the fused kernels, every output poisoned
   with NaN before the run, against a float32 dense reference in PyTorch: relative error ||x - ref|| / ||ref||
   under 1e-2 for each;
3. timing at B=1, H=16, S=16384, D=128, bfloat16, for the masks causal, causal document (8 equal documents) and
   causal sliding window 1024 (query i sees keys [i - 1024, i]): forward, and forward + backward when the
   backward is there, of oarlock (pre-pass included), torch.compile'd flex_attention with the equivalent block
   masks (block-mask creation not timed) and torch SDPA (is_causal for causal; a dense boolean mask
   otherwise); triton.testing.do_bench medians. Effective TFLOP/s = 4 B H S^2 D density / time for the forward,
   3.5 times that work for forward + backward, with density the fraction of unmasked (query, key) pairs. The
   oarlock and flex outputs are also compared at the timing size (the masks must agree).

--emulate runs it all without a GPU, as a smoke test of this script: PyTorch on the CPU, numpy for cupy, the
kernels compiled for the host by oarlock_cuda.emulation (one OS thread per CUDA thread: keep the sizes small,
e.g. --seq 128 --check-seq 128 --heads 2 --window 40) and wall-clock medians for do_bench; its timings mean
nothing.

A short table ends the output; with $OUT set, the results go to $OUT/flashmask_gpu.json too. Exit status: 0 when
every check passes, 1 when one fails, 2 when there is no GPU (or torch / cupy / triton is missing).

    python bench/flashmask_gpu.py [--seq 16384] [--heads 16] [--dim 128] [--check-seq 2048] [--no-flex] ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

from _checkout import bootstrap   # bench/ is sys.path[0] when this script runs

MASKS = ("causal", "document", "window")
MASK_TITLES = {"causal": "causal", "document": "causal document", "window": "sliding window"}
TOL = 1e-2


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=16384, help="sequence length of the timings (default 16384)")
    p.add_argument("--dim", type=int, default=128, choices=(64, 128), help="head dim (default 128)")
    p.add_argument("--check-seq", type=int, default=2048, help="sequence length of the correctness checks")
    p.add_argument("--docs", type=int, default=8, help="equal documents of the causal document mask (default 8)")
    p.add_argument("--window", type=int, default=1024, help="sliding window: keys [i - window, i] (default 1024)")
    p.add_argument("--masks", default=",".join(MASKS), help=f"comma-separated subset of {','.join(MASKS)}")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms (default 25)")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms (default 100)")
    p.add_argument("--no-flex", action="store_true", help="skip FlexAttention")
    p.add_argument("--no-sdpa", action="store_true", help="skip torch SDPA")
    p.add_argument("--no-backward", action="store_true", help="forward only, even when the backward is there")
    p.add_argument("--emulate", action="store_true",
                   help="no GPU: build and check (no timings) on the host emulation of the kernels (small sizes)")
    args = p.parse_args(argv)
    args.masks = [m.strip() for m in args.masks.split(",") if m.strip()]
    bad = [m for m in args.masks if m not in MASKS]
    if bad:
        p.error(f"--masks: unknown {bad}; accepted: {', '.join(MASKS)}")
    if args.seq % args.docs or args.check_seq % args.docs:
        p.error("--seq and --check-seq must be multiples of --docs")
    return args


def _fail_setup(message):
    print(f"flashmask_gpu.py: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


# -- masks --------------------------------------------------------------------------------------------------

class Mask:
    """One mask three ways: oarlock's arguments, a flex mask_mod and a dense boolean (True = attend)."""

    def __init__(self, kind, s, docs, window, torch, device):
        self.kind, self.s = kind, s
        self.causal, self.sri_host, self.wl, self.wr = True, None, -1, -1
        n = s
        if kind == "causal":
            self.pairs = n * (n + 1) // 2
        elif kind == "document":
            length = n // docs
            self.doc = torch.arange(n, device=device) // length
            ends = ((torch.arange(n) // length) + 1) * length               # LTS[j]: the end of j's document
            self.sri_host = ends.to(torch.int32).reshape(1, 1, n, 1)
            self.pairs = docs * length * (length + 1) // 2
        else:
            self.wl, self.wr, self.window = window, 0, window
            w = min(window, n - 1)
            self.pairs = (w + 1) * (w + 2) // 2 + (n - w - 1) * (w + 1)
        self.density = self.pairs / (n * n)

    def mask_mod(self):
        if self.kind == "causal":
            def mod(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx
        elif self.kind == "document":
            doc = self.doc

            def mod(b, h, q_idx, kv_idx):
                return (q_idx >= kv_idx) & (doc[q_idx] == doc[kv_idx])
        else:
            window = self.window

            def mod(b, h, q_idx, kv_idx):
                return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)
        return mod

    def dense(self, torch, device):
        i = torch.arange(self.s, device=device)[:, None]
        j = torch.arange(self.s, device=device)[None, :]
        return self.mask_mod()(None, None, i, j)


# -- the oarlock calls ----------------------------------------------------------------------------------------

class Poisoned:
    """An array module whose `empty` fills new arrays with NaN (bf16 NaN bits in int16 views, a sentinel in
    other integers): outputs the kernels do not write stand out."""

    def __init__(self, xp):
        self.xp = xp

    def __getattr__(self, name):
        return getattr(self.xp, name)

    def empty(self, shape, dtype=float, **kwargs):
        a = self.xp.empty(shape, dtype=dtype, **kwargs)
        kind = self.xp.dtype(dtype).kind
        if self.xp.dtype(dtype) == self.xp.int16:
            a.fill(0x7FC0)                               # a bfloat16 NaN
        elif kind in "iu":
            a.fill(-987654)
        else:
            a.fill(float("nan"))
        return a


class Oarlock:
    """oarlock's fused kernels on torch bfloat16 tensors (BSHD), through cupy int16 views (no copies); with
    `bf16` (the emulation: numpy), through views of the bfloat16 dtype the arrays have there."""

    def __init__(self, torch, cupy, gpu, backward, bf16=None):
        self.torch, self.cupy, self.gpu, self.backward, self.bf16 = torch, cupy, gpu, backward, bf16

    def view(self, t):
        a = self.cupy.from_dlpack(t.contiguous().view(self.torch.int16))
        return a if self.bf16 is None else a.view(self.bf16)

    def tensor(self, a, dtype=None):
        if dtype == "bf16":
            return self.torch.from_dlpack(a.view(self.cupy.int16)).view(self.torch.bfloat16)
        return self.torch.from_dlpack(a)

    def prepare(self, q, k, v, mask, poison=False):
        cupy = self.cupy
        sri = None if mask.sri_host is None else cupy.asarray(mask.sri_host.numpy())
        xp = Poisoned(cupy) if poison else cupy
        return dict(xp=xp, q=self.view(q), k=self.view(k), v=self.view(v), sri=sri, mask=mask)

    def forward(self, p):
        m = p["mask"]
        return self.gpu.forward(p["xp"], p["q"], p["k"], p["v"], p["sri"], m.causal, m.wl, m.wr, None,
                                ctype="bf16_t")

    def backward_call(self, p, do, out, lse):
        m = p["mask"]
        return self.backward.flashmask_backward_gpu(do, p["q"], p["k"], p["v"], out, lse, p["sri"], None, None, 0.0,
                                                    m.causal, m.wl, m.wr, None, xp=p["xp"], ctype="bf16_t")


def _wall_clock_bench(fn, warmup=0, rep=0, grad_to_none=None, return_mode="median"):
    """do_bench's stand-in for --emulate: the median of three wall-clock runs, in ms."""
    times = []
    for _ in range(3):
        for x in grad_to_none or ():
            x.grad = None
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[1]


def _rel(torch, got, want):
    got, want = got.float(), want.float()
    den = torch.linalg.vector_norm(want).item()
    return torch.linalg.vector_norm(got - want).item() / (den or 1.0)


# -- the run ------------------------------------------------------------------------------------------------

def main(argv=None):
    args = _parse(argv)
    try:
        import torch
    except ImportError:
        _fail_setup("PyTorch is not installed here (the device machine's python3 has it)")
    print(f"oarlock: {bootstrap()}", flush=True)
    if args.emulate:
        import numpy as cupy
        from oarlock_cuda.emulation import HostRuntime

        from oarlock_flashmask import gpu
        gpu.RUNTIME = HostRuntime(Path(os.environ.get("OARLOCK_CUDA_EMU_CACHE") or "/tmp/oarlock-emu"), gpu.source,
                                  gpu.names)
        triton = None
        bf16 = __import__("ml_dtypes").bfloat16
        device = torch.device("cpu")
        gpu_name = "host emulation (no GPU)"
    else:
        if not torch.cuda.is_available():
            _fail_setup("no CUDA GPU here (torch.cuda.is_available() is False): run this on the GPU machine "
                        "(or --emulate for a smoke test on the CPU)")
        try:
            import cupy
            import triton.testing
        except ImportError as exc:
            _fail_setup(f"{exc.name or exc} is not installed here (needs torch, triton and cupy)")
        from oarlock_flashmask import gpu
        bf16 = None
        device = torch.device("cuda")
        gpu_name = torch.cuda.get_device_name()
    from oarlock_flashmask import gpu_backward
    backward = None if args.no_backward else gpu_backward
    import torch.nn.functional as F

    torch.manual_seed(0)
    results = {"config": {**{k: v for k, v in vars(args).items()}, "gpu": gpu_name, "torch": torch.__version__,
                          "cupy": cupy.__version__, "triton": getattr(triton, "__version__", None),
                          "backward": backward is not None},
               "build": {}, "checks": [], "timings": []}
    ol = Oarlock(torch, cupy, gpu, backward, bf16)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    print(f"# FlashMask GPU bench on {results['config']['gpu']} (torch {torch.__version__}, cupy {cupy.__version__})",
          flush=True)

    # 1. build
    t0 = time.perf_counter()
    dev_id = torch.cuda.current_device() if device.type == "cuda" else 0
    names = gpu.names()
    for name in names:
        fn = gpu.RUNTIME.function(gpu.FAMILY, name, dev_id)
        attrs = {}
        for key in ("num_regs", "local_size_bytes", "shared_size_bytes", "max_threads_per_block"):
            try:
                attrs[key] = int(getattr(fn, key))
            except Exception:
                pass
        results["build"][name] = attrs
    results["build_seconds"] = time.perf_counter() - t0
    print(f"## build: {len(names)} kernels in {results['build_seconds']:.1f} s ({'g++' if args.emulate else 'NVRTC'})")
    for name, attrs in results["build"].items():
        print(f"  {name}: {attrs}")

    b, h, d = args.batch, args.heads, args.dim
    scale = 1.0 / math.sqrt(d)

    def inputs(s, grad=False):
        shape = (b, s, h, d)
        return [torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(4 if grad else 3)]

    # 2. correctness
    print(f"\n## correctness at S={args.check_seq} (B={b}, H={h}, D={d}, bf16) vs a float32 dense reference",
          flush=True)
    for kind in args.masks:
        mask = Mask(kind, args.check_seq, args.docs, args.window, torch, device)
        q, k, v, do = inputs(args.check_seq, grad=True)
        try:
            p = ol.prepare(q, k, v, mask, poison=True)
            out_c, lse_c = ol.forward(p)
            out = ol.tensor(out_c, "bf16")
            lse = ol.tensor(lse_c)
            grads = None
            if backward is not None:
                dq, dk, dv = ol.backward_call(p, ol.view(do), out_c, lse_c)
                grads = [ol.tensor(x, "bf16") for x in (dq, dk, dv)]
            sync()
            q32, k32, v32 = (x.float().permute(0, 2, 1, 3).requires_grad_() for x in (q, k, v))
            s = (q32 @ k32.transpose(-1, -2)) * scale
            s = s.masked_fill(~mask.dense(torch, device), float("-inf"))
            lse_ref = torch.logsumexp(s, dim=-1)
            out_ref = torch.softmax(s, dim=-1) @ v32
            errs = {"out": _rel(torch, out.permute(0, 2, 1, 3), out_ref), "lse": _rel(torch, lse, lse_ref)}
            if grads is not None:
                out_ref.backward(do.float().permute(0, 2, 1, 3))
                for name, got, ref in zip(("dq", "dk", "dv"), grads, (q32.grad, k32.grad, v32.grad)):
                    errs[name] = _rel(torch, got.permute(0, 2, 1, 3), ref)
            passed = all(e < TOL for e in errs.values())       # NaN (an unwritten output) fails too
            del s, out_ref, q32, k32, v32
        except Exception:
            traceback.print_exc()
            errs, passed = {"error": traceback.format_exc(limit=3)}, False
        results["checks"].append({"mask": kind, "seq": args.check_seq, "passed": passed, "errors": errs})
        shown = ", ".join(f"{n} {e:.2e}" if isinstance(e, float) else f"{n}: see above" for n, e in errs.items())
        print(f"  {'PASS' if passed else 'FAIL'} {MASK_TITLES[kind]}: {shown}", flush=True)
        sync()

    # 3. timings
    s = args.seq
    print(f"\n## timings at B={b}, H={h}, S={s}, D={d}, bf16 (triton do_bench medians)", flush=True)
    flex = create_block_mask = None
    if not args.no_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            for limit in ("cache_size_limit", "recompile_limit"):    # one graph per mask and mode: no eager fallback
                if hasattr(torch._dynamo.config, limit):
                    setattr(torch._dynamo.config, limit, max(64, getattr(torch._dynamo.config, limit)))
            flex = torch.compile(flex_attention, dynamic=False)
        except Exception as exc:
            print(f"  flex_attention unavailable: {exc}")
    bench = _wall_clock_bench if args.emulate else triton.testing.do_bench
    rows = []

    def record(kind, impl, mode, fn, mask, grad_to_none=None):
        flops = 4.0 * b * h * s * s * d * mask.density * (3.5 if mode == "fwd+bwd" else 1.0)
        try:
            fn()
            sync()
            ms = bench(fn, warmup=args.warmup, rep=args.rep, grad_to_none=grad_to_none, return_mode="median")
            entry = {"mask": kind, "impl": impl, "mode": mode, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}
        except Exception as exc:
            traceback.print_exc()
            entry = {"mask": kind, "impl": impl, "mode": mode, "ms": None, "tflops": None,
                     "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        results["timings"].append(entry)
        rows.append(entry)
        shown = f"{entry['ms']:.3f} ms, {entry['tflops']:.1f} TFLOP/s" if entry["ms"] else entry["error"]
        print(f"  {MASK_TITLES[kind]:16s} {impl:8s} {mode:8s} {shown}", flush=True)
        sync()

    modes = ["fwd"] + (["fwd+bwd"] if backward is not None else [])

    def time_mask(kind):
        """Everything timed for one mask (its tensors are freed on return)."""
        mask = Mask(kind, s, args.docs, args.window, torch, device)
        q, k, v, do = inputs(s, grad=True)
        p = ol.prepare(q, k, v, mask)
        out_c, lse_c = ol.forward(p)
        record(kind, "oarlock", "fwd", lambda: ol.forward(p), mask)
        if backward is not None:
            do_c = ol.view(do)

            def oarlock_fwd_bwd():
                o, l_ = ol.forward(p)
                ol.backward_call(p, do_c, o, l_)
            record(kind, "oarlock", "fwd+bwd", oarlock_fwd_bwd, mask)
        qh, kh, vh, doh = (x.permute(0, 2, 1, 3).contiguous() for x in (q, k, v, do))   # [B, H, S, D]
        qg, kg, vg = (x.clone().requires_grad_() for x in (qh, kh, vh))
        if flex is not None:
            try:
                block_mask = create_block_mask(mask.mask_mod(), B=None, H=None, Q_LEN=s, KV_LEN=s, device=device)
                ref = flex(qh, kh, vh, block_mask=block_mask)
                diff = _rel(torch, ol.tensor(out_c, "bf16").permute(0, 2, 1, 3), ref)
                same = diff < 2 * TOL
                results["checks"].append({"mask": kind, "seq": s, "passed": same, "errors": {"out vs flex": diff}})
                print(f"  {'PASS' if same else 'FAIL'} {MASK_TITLES[kind]}: oarlock out vs flex out at S={s}: "
                      f"{diff:.2e}", flush=True)
                del ref
                record(kind, "flex", "fwd", lambda: flex(qh, kh, vh, block_mask=block_mask), mask)
                if "fwd+bwd" in modes:
                    record(kind, "flex", "fwd+bwd", lambda: flex(qg, kg, vg, block_mask=block_mask).backward(doh),
                           mask, grad_to_none=[qg, kg, vg])
            except Exception as exc:
                traceback.print_exc()
                print(f"  flex {kind}: {type(exc).__name__}: {exc}")
        if not args.no_sdpa:
            if kind == "causal":
                def sdpa(x, y, z):
                    return F.scaled_dot_product_attention(x, y, z, is_causal=True)
            else:
                dense = mask.dense(torch, device)

                def sdpa(x, y, z):
                    return F.scaled_dot_product_attention(x, y, z, attn_mask=dense)
            record(kind, "sdpa", "fwd", lambda: sdpa(qh, kh, vh), mask)
            if "fwd+bwd" in modes:
                record(kind, "sdpa", "fwd+bwd", lambda: sdpa(qg, kg, vg).backward(doh), mask,
                       grad_to_none=[qg, kg, vg])

    for kind in args.masks:
        time_mask(kind)
        sync()

    return _finish(results, rows, args, modes, torch, device)


def _finish(results, rows, args, modes, torch, device):
    """The table (when anything was timed), the verdict and the JSON file."""
    b, h, s, d = args.batch, args.heads, args.seq, args.dim
    if rows:
        print(f"\n## FlashMask attention, B={b} H={h} S={s} D={d} bf16: median ms (effective TFLOP/s)")
        impls = ["oarlock"] + ([] if args.no_flex else ["flex"]) + ([] if args.no_sdpa else ["sdpa"])
        print("| mask | density | mode | " + " | ".join(impls) + " |")
        print("|---|---|---|" + "---|" * len(impls))
        for kind in args.masks:
            density = Mask(kind, s, args.docs, args.window, torch, device).density
            for mode in modes:
                cells = []
                for impl in impls:
                    e = next((r for r in rows if (r["mask"], r["impl"], r["mode"]) == (kind, impl, mode)), None)
                    cells.append("-" if e is None else ("error" if e["ms"] is None else
                                                        f"{e['ms']:.2f} ({e['tflops']:.0f})"))
                print(f"| {MASK_TITLES[kind]} | {density:.3f} | {mode} | " + " | ".join(cells) + " |")
    checks = results["checks"]
    ok = bool(checks) and all(c["passed"] for c in checks)
    print(f"\ncorrectness: {sum(c['passed'] for c in checks)}/{len(checks)} checks passed; "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    results["passed"] = ok
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "flashmask_gpu.json"
        path.write_text(json.dumps(results, indent=1, default=str))
        print(f"results: {path}")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
