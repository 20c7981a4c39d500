"""Masked attention on CPU: oarlock's flashmask_attention against PyTorch SDPA (dense mask) and FlexAttention.

B=1, H=8, D=64, float32, S in --seq-lens (default 2048, 4096, 8192), three masks:
  causal            key j visible to queries i >= j                          (density ~0.5)
  causal document   8 equal documents, causal inside each, nothing across    (density ~1/16)
  sliding window    causal, query i sees keys [i - S/16, i]                   (density ~1/16)
Frameworks/rows:
  oarlock           oarlock.nn.functional.flashmask_attention, BSHD, startend_row_indices [1, 1, S, 1]
                    (int32, LTS column) with causal=True; plain causal uses startend_row_indices=None
  sdpa-dense        torch scaled_dot_product_attention with the mask as a dense boolean [S, S]
                    (the reference every ratio is taken against)
  sdpa-is_causal    torch SDPA with is_causal=True (causal mask only: the extra reference row; the goals
                    list oarlock's plain causal time over it, fwd and fwd+bwd, per S)
  flex              torch FlexAttention, eager, with a BlockMask from create_block_mask(mask_mod)
                    (forward only: PyTorch raises for FlexAttention backward on CPU)

"fwd" is the forward without a graph (oarlock.no_grad / torch.no_grad); "fwd+bwd" is the forward with
q, k, v requiring gradients plus out.sum().backward(). Times are medians of --repeat calls after one
warm-up call.

Every (framework, S, mask) case runs in a fresh subprocess. Memory: "RSS" is the process's peak
resident set size minus its RSS just before the first timed call (inputs and mask already built, lazy
imports primed by a tiny call), for every framework; the peak mark is reset there (write 5 to
/proc/self/clear_refs, read VmHWM; where that is refused, resource.getrusage's lifetime ru_maxrss);
it is read after the forward timings (fwd column) and again after the fwd+bwd timings. For oarlock,
"array peak" is additionally oarlock.device.max_memory_allocated() - memory_allocated() around the
calls, after reset_max_memory_allocated(). torch has no CPU allocation counter (tracemalloc does not see it).

    python bench/flashmask.py [--seq-lens 2048,4096,8192] [--repeat 3] [--frameworks ...] [--json out.json]

--interleaved: plain causal only, in ONE process: oarlock, SDPA is_causal and (with --tiles) oarlock with its
fused C kernels turned off (its numpy tiles) take turns call by call, each figure the median over --repeat turns
of the process CPU time (time.process_time, all threads) and of the wall time. On a shared machine a neighbour
slows every framework's calls alike this way, and CPU time does not count the time a thread waits for a core;
separate processes minutes apart (the default mode) do not compare on such a machine.

    python bench/flashmask.py --interleaved --seq-lens 4096,8192 --repeat 7 [--tiles]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

B, H, D = 1, 8, 64
DOCS = 8
MASKS = ("causal", "document", "window")
MASK_NAMES = {"causal": "causal", "document": f"causal document ({DOCS} docs)", "window": "sliding window S/16"}
FRAMEWORKS = ("oarlock", "sdpa-dense", "sdpa-is_causal", "flex")


# -- masks ------------------------------------------------------------------------------------------

def window_of(s: int) -> int:
    return s // 16


def doc_ids(s: int) -> np.ndarray:
    return np.repeat(np.arange(DOCS), s // DOCS + (s % DOCS > 0))[:s]


def lts_column(mask: str, s: int) -> np.ndarray | None:
    """The LTS column of flashmask's causal encoding: rows >= LTS[j] of key column j are masked."""
    j = np.arange(s)
    if mask == "causal":
        return None
    if mask == "document":
        ids = doc_ids(s)
        ends = np.searchsorted(ids, ids, side="right")  # first row after key j's document
        return ends.astype(np.int32)
    if mask == "window":
        return np.minimum(j + window_of(s) + 1, s).astype(np.int32)
    raise ValueError(mask)


def dense_mask(mask: str, s: int) -> np.ndarray:
    """Boolean [S, S], True where query i may attend to key j."""
    i = np.arange(s)[:, None]
    j = np.arange(s)[None, :]
    allowed = i >= j
    if mask == "document":
        ids = doc_ids(s)
        allowed &= ids[:, None] == ids[None, :]
    elif mask == "window":
        allowed &= (i - j) <= window_of(s)
    return allowed


def density(mask: str, s: int) -> float:
    return float(dense_mask(mask, s).mean())


def inputs(s: int):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((B, s, H, D)).astype(np.float32) for _ in range(3)]  # BSHD


# -- measurement helpers ----------------------------------------------------------------------------

def rss_now() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int:
    """VmHWM from /proc/self/status (resettable), else resource.getrusage's ru_maxrss (a lifetime peak)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


# -- workers ----------------------------------------------------------------------------------------

def oarlock_case(mask: str, s: int, repeat: int, modes) -> dict:
    import oarlock
    import oarlock.nn.functional as F

    def prepared(s):
        lts = lts_column(mask, s)
        sri = None if lts is None else oarlock.to_tensor(lts.reshape(1, 1, s, 1))
        return [oarlock.to_tensor(a) for a in inputs(s)], sri

    # prime lazy imports and one-off set-up with a tiny call (grad on), so RSS growth is the call's own
    (tq, tk, tv), tsri = prepared(64)
    for t in (tq, tk, tv):
        t.stop_gradient = False
    F.flashmask_attention(tq, tk, tv, tsri, causal=True).sum().backward()
    del tq, tk, tv, tsri
    (q, k, v), sri = prepared(s)
    dev = oarlock.device
    out = {}
    reset_peak_rss()  # forget the peaks of imports and set-up
    rss0 = rss_now()
    if "fwd" in modes:
        def fwd():
            with oarlock.no_grad():
                return F.flashmask_attention(q, k, v, sri, causal=True)
        dev.reset_max_memory_allocated()
        base = dev.memory_allocated()
        out["fwd_ms"] = median_ms(fwd, repeat)
        out["fwd_array_peak"] = dev.max_memory_allocated() - base
        out["fwd_rss_peak"] = peak_rss() - rss0
    if "fwdbwd" in modes:
        for t in (q, k, v):
            t.stop_gradient = False

        def fwdbwd():
            o = F.flashmask_attention(q, k, v, sri, causal=True)
            o.sum().backward()
            for t in (q, k, v):
                t.clear_gradient()
        dev.reset_max_memory_allocated()
        base = dev.memory_allocated()
        out["fwdbwd_ms"] = median_ms(fwdbwd, repeat)
        out["fwdbwd_array_peak"] = dev.max_memory_allocated() - base
        out["fwdbwd_rss_peak"] = peak_rss() - rss0
    return out


def torch_case(framework: str, mask: str, s: int, repeat: int, modes) -> dict:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(os.cpu_count())
    # prime lazy imports and one-off set-up with a tiny call, so RSS growth is the call's own
    tq, tk, tv = (torch.randn(B, H, 64, D, requires_grad=framework != "flex") for _ in range(3))
    if framework == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex_attention(tq, tk, tv, block_mask=create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 64, 64,
                                                                 device="cpu"))
    else:
        F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.ones(64, 64, dtype=torch.bool)).sum().backward()
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).sum().backward()
    del tq, tk, tv
    q, k, v = (torch.from_numpy(a).transpose(1, 2).contiguous() for a in inputs(s))  # BHSD
    if framework == "sdpa-is_causal":
        if mask != "causal":
            return {"skip": "is_causal expresses the causal mask only"}
        attn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif framework == "sdpa-dense":
        m = torch.from_numpy(dense_mask(mask, s))
        attn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    else:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        ids = torch.from_numpy(doc_ids(s))
        w = window_of(s)
        mods = {
            "causal": lambda b, h, qi, ki: qi >= ki,
            "document": lambda b, h, qi, ki: (qi >= ki) & (ids[qi] == ids[ki]),
            "window": lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= w),
        }
        block_mask = create_block_mask(mods[mask], None, None, s, s, device="cpu")
        attn = lambda q, k, v: flex_attention(q, k, v, block_mask=block_mask)
    out = {}
    reset_peak_rss()  # forget the peaks of imports and set-up
    rss0 = rss_now()
    if "fwd" in modes:
        def fwd():
            with torch.no_grad():
                return attn(q, k, v)
        out["fwd_ms"] = median_ms(fwd, repeat)
        out["fwd_rss_peak"] = peak_rss() - rss0
    if "fwdbwd" in modes:
        if framework == "flex":
            out["fwdbwd_skip"] = "FlexAttention has no backward on CPU"
            return out
        for t in (q, k, v):
            t.requires_grad_(True)

        def fwdbwd():
            attn(q, k, v).sum().backward()
            for t in (q, k, v):
                t.grad = None
        out["fwdbwd_ms"] = median_ms(fwdbwd, repeat)
        out["fwdbwd_rss_peak"] = peak_rss() - rss0
    return out


def worker(spec: str, repeat: int, modes) -> dict:
    import warnings
    warnings.filterwarnings("ignore")
    framework, mask, s = spec.split(":")
    s = int(s)
    if framework == "oarlock":
        return oarlock_case(mask, s, repeat, modes)
    return torch_case(framework, mask, s, repeat, modes)


def check_agreement(s: int = 256) -> dict:
    """Max |oarlock - torch dense SDPA| per mask, forward outputs, at a small S (in this process)."""
    import oarlock
    import oarlock.nn.functional as F
    import torch
    result = {}
    qn, kn, vn = inputs(s)
    for mask in MASKS:
        lts = lts_column(mask, s)
        sri = None if lts is None else oarlock.to_tensor(lts.reshape(1, 1, s, 1))
        with oarlock.no_grad():
            o = F.flashmask_attention(*(oarlock.to_tensor(a) for a in (qn, kn, vn)), sri, causal=True).numpy()
        tq, tk, tv = (torch.from_numpy(a).transpose(1, 2) for a in (qn, kn, vn))
        ref = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=torch.from_numpy(dense_mask(mask, s))).transpose(1, 2).numpy()
        result[mask] = float(np.abs(o - ref).max())
    return result


# -- interleaved ------------------------------------------------------------------------------------

def interleaved(seq_lens, modes, repeat: int, tiles: bool) -> dict:
    """{S: {mode: {name: (cpu ms, wall ms)}}}: plain causal, the frameworks' calls alternating in this process."""
    import oarlock
    import oarlock.nn.functional as OF
    import torch
    from oarlock_flashmask import kernel

    torch.set_num_threads(os.cpu_count())
    fused = kernel._fused_forward, kernel._fused_backward

    def use_fused(on):
        kernel._fused_forward = fused[0] if on else (lambda *args: False)
        kernel._fused_backward = fused[1] if on else (lambda *args: None)

    def oarlock_call(q, k, v, mode, on):
        use_fused(on)
        ts = [oarlock.to_tensor(a) for a in (q, k, v)]
        if mode == "fwd":
            with oarlock.no_grad():
                OF.flashmask_attention(*ts, causal=True)
            return
        for t in ts:
            t.stop_gradient = False
        OF.flashmask_attention(*ts, causal=True).sum().backward()

    def torch_call(q, k, v, mode):
        ts = [torch.from_numpy(a).transpose(1, 2) for a in (q, k, v)]   # BHSD views, as SDPA takes them
        if mode == "fwd":
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True)
            return
        for t in ts:
            t.requires_grad_(True)
        torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True).sum().backward()

    results = {}
    try:
        for s in seq_lens:
            q, k, v = inputs(s)
            results[s] = {}
            for mode in modes:
                calls = {"oarlock": functools.partial(oarlock_call, q, k, v, mode, True),
                         "sdpa-is_causal": functools.partial(torch_call, q, k, v, mode)}
                if tiles:
                    calls["oarlock-tiles"] = functools.partial(oarlock_call, q, k, v, mode, False)
                times = {name: ([], []) for name in calls}
                for fn in calls.values():
                    fn()   # warm-up
                for _ in range(repeat):
                    for name, fn in calls.items():
                        c0, w0 = time.process_time(), time.perf_counter()
                        fn()
                        times[name][0].append(time.process_time() - c0)
                        times[name][1].append(time.perf_counter() - w0)
                results[s][mode] = {name: (statistics.median(c) * 1e3, statistics.median(w) * 1e3)
                                    for name, (c, w) in times.items()}
    finally:
        use_fused(True)
    return results


def print_interleaved(results: dict, repeat: int) -> None:
    print(f"\nplain causal, B={B} H={H} D={D} float32, {os.cpu_count()} CPU cores, calls interleaved in one process, "
          f"median of {repeat}; ratio = oarlock / SDPA is_causal (lower is faster)")
    header = (f"{'S':>5} {'mode':<8} {'framework':<15} {'CPU ms':>9} {'wall ms':>9} {'CPU ratio':>10} "
              f"{'wall ratio':>11}")
    print(header)
    print("-" * len(header))
    for s, per_mode in results.items():
        for mode, per_fw in per_mode.items():
            ref = per_fw["sdpa-is_causal"]
            for name, (cpu, wall) in per_fw.items():
                print(f"{s:>5} {mode:<8} {name:<15} {cpu:>9.1f} {wall:>9.1f} {cpu / ref[0]:>9.2f}x "
                      f"{wall / ref[1]:>10.2f}x")


# -- driver -----------------------------------------------------------------------------------------

def run_worker(spec: str, repeat: int, modes) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", spec, "--repeat", str(repeat),
           "--modes", ",".join(modes)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": (lines[-1] if lines else f"exit status {proc.returncode}")[:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.0f}"


def fmt_ms(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def print_table(results: dict, densities: dict, repeat: int) -> None:
    print(f"\nmasked attention, B={B} H={H} D={D} float32, median of {repeat} calls after warm-up, "
          f"{os.cpu_count()} CPU cores; ratio = ms / sdpa-dense ms (lower is faster); memory in MiB")
    header = (f"{'S':>5} {'mask':<26} {'dens':>5} {'framework':<15} {'fwd ms':>9} {'ratio':>6} "
              f"{'fwd+bwd ms':>11} {'ratio':>6} {'RSS fwd':>8} {'RSS f+b':>8} {'arr fwd':>8} {'arr f+b':>8}")
    print(header)
    print("-" * len(header))
    for s, per_mask in results.items():
        for mask, per_fw in per_mask.items():
            ref = per_fw.get("sdpa-dense") or {}
            for fw, r in per_fw.items():
                lead = f"{s:>5} {MASK_NAMES[mask]:<26} {densities[s][mask]:>5.3f} {fw:<15}"
                if "error" in r:
                    print(f"{lead} FAILED: {r['error']}")
                    continue
                if "skip" in r:
                    continue
                def ratio(key, r=r, ref=ref):
                    return f"{r[key] / ref[key]:.2f}x" if r.get(key) is not None and ref.get(key) else "-"
                note = f"  ({r['fwdbwd_skip']})" if "fwdbwd_skip" in r else ""
                print(f"{lead} {fmt_ms(r.get('fwd_ms')):>9} {ratio('fwd_ms'):>6} {fmt_ms(r.get('fwdbwd_ms')):>11} "
                      f"{ratio('fwdbwd_ms'):>6} {mib(r.get('fwd_rss_peak')):>8} {mib(r.get('fwdbwd_rss_peak')):>8} "
                      f"{mib(r.get('fwd_array_peak')):>8} {mib(r.get('fwdbwd_array_peak')):>8}{note}")


def goals(results: dict) -> list[tuple[str, bool | None, str]]:
    """(goal, met or None when not measurable, figures)."""
    out = []
    get = lambda s, m, fw, key: ((results.get(s) or {}).get(m) or {}).get(fw, {}).get(key)
    # plain causal against PyTorch's dedicated is_causal path, measured in the same run
    for sv in sorted(results):
        for key, what in (("fwd_ms", "fwd"), ("fwdbwd_ms", "fwd+bwd")):
            o, t = get(sv, "causal", "oarlock", key), get(sv, "causal", "sdpa-is_causal", key)
            name = f"oarlock causal {what} no slower than SDPA is_causal at S={sv}"
            if o and t:
                out.append((name, o <= t, f"{o:.1f} ms vs {t:.1f} ms ({o / t:.2f}x)"))
    big = max(results) if results else None
    s = 8192 if 8192 in results else big
    c, w = get(s, "causal", "oarlock", "fwd_ms"), get(s, "window", "oarlock", "fwd_ms")
    name = f"oarlock sliding window >= 5x faster than causal at S={s} (fwd)"
    out.append((name, None, "not measured") if not (c and w) else (name, c / w >= 5, f"{c / w:.2f}x"))
    d, ref = get(s, "document", "oarlock", "fwd_ms"), get(s, "document", "sdpa-dense", "fwd_ms")
    name = f"oarlock causal-document fwd >= 3x faster than dense-mask SDPA at S={s}"
    out.append((name, None, "not measured") if not (d and ref) else (name, ref / d >= 3, f"{ref / d:.2f}x"))
    # memory roughly linear in S: peak / S stays within 2x across the measured S (quadratic would grow 4x
    # per doubling). The array counter is used (it sees only oarlock's arrays, not allocator noise).
    for key in ("fwd_array_peak", "fwdbwd_array_peak"):
        pts = [(sv, get(sv, "document", "oarlock", key)) for sv in sorted(results)]
        pts = [(sv, p) for sv, p in pts if p]
        name = f"oarlock {key.split('_')[0]} peak memory ~linear in S (causal document)"
        if len(pts) < 2:
            out.append((name, None, "needs two S"))
            continue
        per_s = [p / sv for sv, p in pts]
        growth = (pts[-1][1] / pts[0][1]) / (pts[-1][0] / pts[0][0])
        figs = ", ".join(f"S={sv}: {p / 2**20:.0f} MiB" for sv, p in pts)
        out.append((name, max(per_s) / min(per_s) <= 2.0,
                    f"{figs}; peak grows {growth:.2f}x the growth of S (1 = linear, {pts[-1][0] // pts[0][0]} = "
                    f"quadratic)"))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-lens", default="2048,4096,8192", help="comma-separated S (default 2048,4096,8192)")
    parser.add_argument("--masks", default=",".join(MASKS), help=f"subset of: {', '.join(MASKS)} (default all)")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                        help=f"subset of: {', '.join(FRAMEWORKS)} (default all)")
    parser.add_argument("--modes", default="fwd,fwdbwd", help="subset of: fwd, fwdbwd (default both)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per figure; the median is shown (default 3)")
    parser.add_argument("--no-check", action="store_true", help="skip the S=256 agreement check against torch")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    parser.add_argument("--interleaved", action="store_true",
                        help="plain causal: oarlock and SDPA is_causal alternating in one process, CPU and wall time")
    parser.add_argument("--tiles", action="store_true",
                        help="with --interleaved: also oarlock with its fused C kernels off (the numpy tiles)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # FRAMEWORK:MASK:S
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"argument --repeat: expected a positive integer, got {args.repeat}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - {"fwd", "fwdbwd"} or not modes:
        parser.error(f"argument --modes: expected a subset of fwd,fwdbwd, got {args.modes!r}")
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat, modes)))
        return 0
    try:
        seq_lens = [int(x) for x in args.seq_lens.split(",") if x.strip()]
    except ValueError:
        parser.error(f"argument --seq-lens: expected comma-separated integers, got {args.seq_lens!r}")
    if not seq_lens or any(s < 16 or s % 16 for s in seq_lens):
        parser.error(f"argument --seq-lens: expected multiples of 16, got {args.seq_lens!r}")
    if args.interleaved:
        results = interleaved(seq_lens, modes, args.repeat, args.tiles)
        print_interleaved(results, args.repeat)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"cpu_count": os.cpu_count(), "repeat": args.repeat, "B": B, "H": H, "D": D,
                           "interleaved_ms_cpu_wall": results}, fh, indent=2)
        return 0
    masks = [m.strip() for m in args.masks.split(",") if m.strip()]
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for opt, got, allowed in (("--masks", masks, MASKS), ("--frameworks", frameworks, FRAMEWORKS)):
        bad = [x for x in got if x not in allowed]
        if bad:
            parser.error(f"argument {opt}: unknown {', '.join(bad)}; choose from {', '.join(allowed)}")

    check = None
    if not args.no_check and "oarlock" in frameworks:
        try:
            check = check_agreement()
            print("agreement with torch dense-mask SDPA at S=256 (max abs diff): "
                  + ", ".join(f"{m} {d:.2e}" for m, d in check.items()))
        except Exception as exc:  # noqa: BLE001 - a report, not a crash
            check = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            print(f"agreement check failed: {check['error']}")
    densities = {s: {m: density(m, s) for m in masks} for s in seq_lens}
    results = {}
    for s in seq_lens:
        results[s] = {}
        for mask in masks:
            results[s][mask] = {}
            for fw in frameworks:
                if fw == "sdpa-is_causal" and mask != "causal":
                    continue
                t0 = time.perf_counter()
                r = run_worker(f"{fw}:{mask}:{s}", args.repeat, modes)
                results[s][mask][fw] = r
                print(f"  S={s} {mask} {fw}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print_table(results, densities, args.repeat)
    print("\ngoals:")
    checked = goals(results)
    for name, ok, figs in checked:
        print(f"  [{'n/a' if ok is None else 'met' if ok else 'NOT met'}] {name}: {figs}")
    if "flex" in frameworks:
        print("note: FlexAttention runs eagerly on CPU (no torch.compile) and has no CPU backward; "
              "its fwd+bwd is not measured.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu_count": os.cpu_count(), "repeat": args.repeat, "B": B, "H": H, "D": D,
                       "densities": densities, "agreement_s256": check, "results": results,
                       "goals": [{"goal": n, "met": ok, "figures": f} for n, ok, f in checked]}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
