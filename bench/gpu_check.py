"""Check oarlock's "gpu" device (oarlock-cuda) on one GPU, in one run of under 5 minutes. Four parts:

  a  the op test table on the GPU: tests/test_op_table.py with OARLOCK_TEST_DEVICE=gpu (every op, dtype and
     case against the float64 references the CPU run meets, plus finite-difference gradients), and the GPU
     tests of the fused kernels (plugins/cuda/tests/test_fused_kernels.py: GPU vs CPU, fused vs generic);
  b  `oarlock train`'s GPT trained on the GPU for --train-steps steps (Trainer API, the command's defaults):
     the loss must fall;
  c  per-op overhead: a + b on 8x8 float32 tensors against raw cupy in the same run (goal: within 1.5x);
  d  each fused kernel against the generic (multi-pass) kernel of its op on the same GPU arrays: median of
     --repeat timings with CUDA events, and the outputs compared.

Each part prints a markdown table; a PASS/FAIL summary ends the run (exit 1 on any FAIL). Without a GPU
(or without cupy) it prints "no GPU: skipped" and exits 0.

Where the workspace is not pip-installed (the GPU machine), the plugins' entry points are declared through a
temporary .dist-info on sys.path (and PYTHONPATH, for the pytest run), so nothing needs installing.

    python bench/gpu_check.py [--parts abcd] [--table-timeout 150] [--train-steps 300] [--repeat 15]
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from _checkout import bootstrap   # bench/ is sys.path[0] when this script runs

ROOT = Path(__file__).resolve().parents[1]
RESULTS: list[tuple[str, str, str]] = []   # (part, PASS/FAIL, detail)


def result(part: str, ok: bool, detail: str) -> None:
    RESULTS.append((part, "PASS" if ok else "FAIL", detail))
    print(f"{'PASS' if ok else 'FAIL'}  {part}: {detail}", flush=True)


def table(headers, rows) -> None:
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print(flush=True)


# -- setup -----------------------------------------------------------------------------------------------

def gpu_available():
    """(cupy, None) when a GPU is usable through cupy and oarlock's "gpu" device, else (None, why not)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a cupy that finds no CUDA library
        return None, f"cupy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"no CUDA device ({type(exc).__name__}: {exc})"
    if count == 0:
        return None, "no CUDA device"
    import oarlock
    try:
        if oarlock.device.device_count("gpu") == 0:
            return None, "oarlock's gpu device reports no device"
    except Exception as exc:
        return None, f"oarlock's gpu device is not usable ({type(exc).__name__}: {exc})"
    return cupy, None


# -- a: the op table --------------------------------------------------------------------------------------------

def start_part_a(args):
    """Start part a's pytest run in the background; finish_part_a collects it."""
    env = dict(os.environ, OARLOCK_TEST_DEVICE="gpu", PYTHONUNBUFFERED="1")
    tests = "plugins/cuda/tests/test_fused_kernels.py::"
    command = [sys.executable, "-m", "pytest", "tests/test_op_table.py",
               tests + "test_gpu_forward_and_backward_match_cpu", tests + "test_gpu_cross_entropy_rotary_dropout_adam",
               tests + "test_gpu_fused_kernels_match_generic_on_the_same_arrays",
               tests + "test_source_compiles_with_nvcc", "-q", "-rfE", "-p", "no:cacheprovider"]
    if importlib.util.find_spec("xdist") is not None:
        command += ["-n", str(max(1, min(8, (os.cpu_count() or 2) - 2)))]
    if importlib.util.find_spec("pytest_timeout") is not None:
        command += ["--timeout", "120"]
    print(f"$ OARLOCK_TEST_DEVICE=gpu {' '.join(command[1:])}  (in the background)\n", flush=True)
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    return process, log, time.perf_counter()


def finish_part_a(args, started) -> None:
    process, log, start = started
    timeout = max(1.0, args.table_timeout - (time.perf_counter() - start))
    try:
        process.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        timed_out = True
    seconds = time.perf_counter() - start
    log.seek(0)
    output = log.read()
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", output)}
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    table(["tests", "passed", "failed", "errors", "skipped", "seconds"],
          [["op table on gpu + fused-kernel GPU tests", counts.get("passed", 0), counts.get("failed", 0),
            counts.get("error", 0) + counts.get("errors", 0), counts.get("skipped", 0), f"{seconds:.0f}"]])
    for line in failures[:40]:
        print("    " + line[:300])
    if len(failures) > 40:
        print(f"    ... and {len(failures) - 40} more")
    if timed_out:
        print(output[-3000:])
        result("a op table", False, f"timed out after {args.table_timeout:.0f} s (raise --table-timeout)")
        return
    if not counts.get("passed") or process.returncode not in (0, 1):
        print(output[-3000:])
    ok = counts.get("passed", 0) > 0 and not failures and process.returncode == 0
    result("a op table", ok, f"{counts.get('passed', 0)} passed, {len(failures)} failed/errors, "
                             f"{counts.get('skipped', 0)} skipped in {seconds:.0f} s")


# -- b: training --------------------------------------------------------------------------------------------

def part_b(args) -> None:
    import oarlock
    from oarlock_train.corpus import build_corpus
    from oarlock_train.trainer import TrainConfig, Trainer

    previous = oarlock.get_device()
    oarlock.set_device("gpu")
    try:
        rows = []
        for document_mask in (True, False):
            steps = args.train_steps
            cfg = TrainConfig(steps=steps, warmup=min(100, steps // 20), document_mask=document_mask)
            try:
                trainer = Trainer(cfg, build_corpus(cfg.seq_len))
                start = time.perf_counter()
                losses = []
                while trainer.step < steps and time.perf_counter() - start < args.train_seconds:
                    losses.append(trainer.train_step())
                seconds = time.perf_counter() - start
                valid = trainer.evaluate()
            except Exception as exc:
                traceback.print_exc(limit=6, file=sys.stdout)
                result(f"b train (document_mask={document_mask})", False, f"{type(exc).__name__}: {exc}")
                continue
            k = max(1, min(20, len(losses) // 5))
            first, last = statistics.mean(losses[:k]), statistics.mean(losses[-k:])
            finite = all(math.isfinite(v) for v in losses) and math.isfinite(valid)
            tokens = len(losses) * trainer.tokens_per_step / seconds
            rows.append([f"GPT, {'causal-document' if document_mask else 'plain causal'} mask", len(losses),
                         f"{first:.3f}", f"{last:.3f}", f"{valid:.3f}", f"{seconds:.1f}", f"{tokens:,.0f}"])
            ok = finite and len(losses) >= min(steps, 50) and last < 0.75 * first
            result(f"b train (document_mask={document_mask})", ok,
                   f"{len(losses)} steps: loss {first:.3f} -> {last:.3f} (mean of {k}), validation {valid:.3f}, "
                   f"{tokens:,.0f} tokens/s")
            if not args.both_masks:
                break
        if rows:
            table(["run", "steps", "first loss", "last loss", "validation", "seconds", "tokens/s"], rows)
    finally:
        oarlock.set_device(previous)


# -- c: overhead ------------------------------------------------------------------------------------------------

def _median_us(cp, fn, number, repeat):
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / number * 1e6


def part_c(args, cp) -> None:
    import oarlock
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2))
    ca, cb = cp.asarray(a_np), cp.asarray(b_np)
    a, b = oarlock.to_tensor(a_np, place="gpu"), oarlock.to_tensor(b_np, place="gpu")
    raw = _median_us(cp, lambda: ca + cb, args.number, args.repeat_overhead)
    off = _median_us(cp, lambda: a + b, args.number, args.repeat_overhead)
    a.stop_gradient = b.stop_gradient = False
    on = _median_us(cp, lambda: a + b, args.number, args.repeat_overhead)
    table(["a + b, 8x8 float32", "us per call", "vs cupy"],
          [["cupy", f"{raw:.2f}", "1.00x"], ["oarlock gpu, grad off", f"{off:.2f}", f"{off / raw:.2f}x"],
           ["oarlock gpu, grad on", f"{on:.2f}", f"{on / raw:.2f}x"]])
    result("c overhead", off <= 1.5 * raw, f"grad off {off:.2f} us vs cupy {raw:.2f} us = {off / raw:.2f}x "
                                           f"(goal <= 1.5x); grad on {on / raw:.2f}x")


# -- d: fused vs generic ---------------------------------------------------------------------------------------

def _event_ms(cp, fn, repeat):
    for _ in range(2):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def _cases(cp, dtype, generator):
    """(op, description, args, kwargs, bytes the fused kernel moves) per fused kernel."""
    import oarlock
    nd = oarlock.dtypes.convert_dtype(dtype).np
    size = nd.itemsize
    rng = cp.random.default_rng(0)

    def rand(*shape, low=-3.0, high=3.0):
        return (rng.random(shape, dtype=cp.float32) * (high - low) + low).astype(nd)

    rows, n = 8192, 4096
    x, g = rand(rows, n), rand(rows, n)
    w, b = rand(n, low=0.5, high=1.5), rand(n)
    stat = cp.ones((rows, 1), dtype=cp.float32)
    classes, ce_rows = 32000, 4096
    logits = rand(ce_rows, classes)
    labels = rng.integers(0, classes, (ce_rows,), dtype=cp.int64)
    flat = rand(1 << 26)
    rot = rand(8, 2048, 32, 128)
    cos, sin = rand(1, 2048, 1, 128), rand(1, 2048, 1, 128)
    p, grad = rand(1 << 25), rand(1 << 25, low=-0.01, high=0.01)
    m1, m2 = cp.zeros_like(p), cp.zeros_like(p)
    adam = dict(lr=1e-3, beta1=0.9, beta2=0.95, epsilon=1e-8, step=3, weight_decay=0.01, decoupled=True)
    return [
        ("softmax", f"[{rows}, {n}]", (x,), {}, 2 * x.size * size),
        ("log_softmax", f"[{rows}, {n}]", (x,), {}, 2 * x.size * size),
        ("cross_entropy", f"[{ce_rows}, {classes}] mean", (logits, labels), {}, logits.size * size),
        ("layer_norm", f"[{rows}, {n}] affine", (x, w, b, (n,), 1e-5), {}, 2 * x.size * size),
        ("rms_norm", f"[{rows}, {n}] weight", (x, w, (n,), None), {}, 2 * x.size * size),
        ("_normalize_grad", f"[{rows}, {n}] layer_norm", (x, w, g, stat * 0.1, stat, (rows, n), (1,), (1, n)), {},
         3 * x.size * size),
        ("gelu", f"[{flat.size}] erf", (flat,), {}, 2 * flat.size * size),
        ("gelu", f"[{flat.size}] tanh", (flat,), {"approximate": True}, 2 * flat.size * size),
        ("fused_rotary_embedding", "[8, 2048, 32, 128]", (rot, cos, sin), {}, 2 * rot.size * size),
        ("dropout", f"[{flat.size}] p=0.1", (flat, 0.1), {"generator": generator}, 3 * flat.size * size),
        ("adam_step_", f"[{p.size}] AdamW", (p, grad, m1, m2, None), adam, 7 * p.size * size),
    ]


def _outputs_close(cp, op, got, want, dtype) -> str:
    """max |fused - generic| / max |generic| over the outputs; raises beyond 10x the dtype's tolerance."""
    if op in ("dropout", "adam_step_"):
        return "(pytest part)"
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    worst = 0.0
    for a, b in zip(got, want):
        a = cp.asnumpy(a.astype(cp.float32)).astype(np.float64)
        b = cp.asnumpy(b.astype(cp.float32)).astype(np.float64)
        if b.size:
            worst = max(worst, float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-30))
    if not worst <= 10 * (1e-5 if dtype == "float32" else 1e-2):
        raise AssertionError(f"{op}: fused and generic outputs differ (max |diff| / max |generic| = {worst:.2e})")
    return f"{worst:.1e}"


def part_d(args, cp) -> None:
    from oarlock.registry import default_registry
    from oarlock_cuda import fused
    import oarlock  # noqa: F401  (loads the plugins, so fused.GENERIC finds the generic kernels)

    generator = default_registry().backends["gpu"].generator(0)
    rows, failures = [], []
    for dtype in args.dtypes.split(","):
        cases = _cases(cp, dtype, generator)
        for op, what, call_args, kwargs, moved in cases:
            fused_fn = lambda op=op, a=call_args, k=kwargs: fused.KERNELS[op](cp, *a, **k)  # noqa: E731
            generic_fn = lambda op=op, a=call_args, k=kwargs: fused.GENERIC(op)(cp, *a, **k)  # noqa: E731
            try:
                want = generic_fn()
            except Exception as exc:  # the generic kernel on cupy (e.g. a bfloat16 gap of cupy): time fused only
                want, note = None, f"generic n/a: {type(exc).__name__}"
            try:
                got = fused_fn()
                close = note if want is None else _outputs_close(cp, op, got, want, dtype)
                t_generic = None if want is None else _event_ms(cp, generic_fn, args.repeat)
                t_fused = _event_ms(cp, fused_fn, args.repeat)
                rows.append([op, what, dtype, "-" if t_generic is None else f"{t_generic:.3f}", f"{t_fused:.3f}",
                             "-" if t_generic is None else f"{t_generic / t_fused:.1f}x",
                             f"{moved / t_fused / 1e6:,.0f}", close])
            except Exception as exc:
                traceback.print_exc(limit=6, file=sys.stdout)
                failures.append(f"{op} {dtype}: {type(exc).__name__}: {exc}")
                rows.append([op, what, dtype, "-", "-", "-", "-", f"FAIL {type(exc).__name__}"])
            del want
        del cases
        cp.get_default_memory_pool().free_all_blocks()
    table(["op", "shape", "dtype", "generic ms", "fused ms", "speedup", "fused GB/s", "max rel. diff"], rows)
    slower = [f"{r[0]} {r[2]}" for r in rows if r[5] != "-" and float(r[5][:-1]) < 1.0]
    result("d fused kernels", not failures,
           f"{len(rows) - len(failures)} of {len(rows)} ran and matched the generic kernels"
           + (f"; slower than generic: {', '.join(slower)}" if slower else "")
           + (f"; failures: {'; '.join(failures)}" if failures else ""))


# -- main ------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="abcd", help="which parts to run (default abcd)")
    parser.add_argument("--table-timeout", type=float, default=170.0, help="seconds for part a's pytest run")
    parser.add_argument("--train-steps", type=int, default=300, help="training steps of part b (default 300)")
    parser.add_argument("--train-seconds", type=float, default=90.0, help="stop part b's training after this long")
    parser.add_argument("--both-masks", action="store_true", help="part b: also train with plain causal attention")
    parser.add_argument("--number", type=int, default=5000, help="part c: calls per timing")
    parser.add_argument("--repeat-overhead", type=int, default=5, help="part c: timings (median)")
    parser.add_argument("--repeat", type=int, default=15, help="part d: timed runs per kernel (median)")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="part d: dtypes (default float32,bfloat16)")
    parser.add_argument("--timeout", type=float, default=290.0, help="dump the stacks and exit after this long")
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(args.timeout, exit=True)

    print(f"oarlock: {bootstrap()}", flush=True)
    cp, why = gpu_available()
    if cp is None:
        print(f"no GPU: skipped ({why})")
        return 0
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"GPU: {props['name'].decode() if isinstance(props['name'], bytes) else props['name']}, cupy "
          f"{cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, Python {sys.version.split()[0]}\n",
          flush=True)
    titles = {"a": "op table on the GPU", "b": "training on the GPU", "c": "per-op overhead",
              "d": "fused kernels vs generic kernels"}

    def run(key, fn):
        print(f"## {key}: {titles[key]}\n", flush=True)
        try:
            fn()
        except Exception as exc:
            traceback.print_exc(limit=8, file=sys.stdout)
            result(key, False, f"{type(exc).__name__}: {exc}")
        print(flush=True)

    # the timings first, on a quiet GPU; then the op table (a subprocess) runs beside the training
    if "c" in args.parts:
        run("c", lambda: part_c(args, cp))
    if "d" in args.parts:
        run("d", lambda: part_d(args, cp))
    started = start_part_a(args) if "a" in args.parts else None
    if "b" in args.parts:
        run("b", lambda: part_b(args))
    if started is not None:
        run("a", lambda: finish_part_a(args, started))
    print("## summary\n")
    for part, status, detail in RESULTS:
        print(f"{status}  {part}: {detail}")
    failed = sum(1 for _, status, _ in RESULTS if status == "FAIL")
    print(f"\n{'FAIL' if failed else 'PASS'}: {len(RESULTS) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
