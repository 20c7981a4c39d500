"""The FP8 CUDA kernels (oarlock_incubate/kernels/fp8.cu, fp8_tc.cu) on a real GPU: the owed run. Prints one line
per check, exits 1 on a failure; needs CuPy and a GPU (the tensor-core checks: sm_89 or later, e.g. an H100/H200).
Expected to take about a minute on an H200, well under 3 (NVRTC compiles the kernels once, in seconds).

1. the quantizers against the generic (numpy) kernels bit for bit (both methods, pow2 on and off, e4m3 and e5m2,
   zeros, inf, NaN, ragged sizes);
2. one mma.sync m16n8k32 per format pair (fp8_mma_probe) on fragments packed by fp8_tc.py's Python copy of the
   PTX layout table, against float64: the instruction (a wrong table gives errors of the size of the values) and
   fp8_tc.cu's shuffle model of it (the model the CPU tests run);
3. the GEMMs on operands quantized by fp8_quant_blockwise's kernel (1x128 blocks; ragged and 16-byte-vector
   shapes): the CUDA-core kernel (fp8_gemm_rows) within float32's bound of the float64 product, the tensor-core
   kernel with the model in place of the instruction bit-equal to it (the same sums in the same order: this
   checks the kernel's tiles, loads, edges and promotion on the GPU), and the tensor-core kernel itself within
   a bound that allows the MMA's reduced accumulation precision (DeepSeek-V3 reports about 14 bits on Hopper:
   unit 2^-13 for the 4 MMAs of each 128-slice); it prints the largest error relative to sum |a b| as well;
4. speed, median of 10 timed runs after 2 warm-up runs (CUDA events): the tensor-core kernel, the CUDA-core kernel
   and a 16-bit cuBLAS matmul of the same shape (cupy.matmul; float16: CuPy has no bfloat16, and Hopper's dense
   bf16 and fp16 tensor-core rates are equal), in TFLOP/s (2 M N K / s).

    python bench/fp8_gpu_check.py            # on a GPU
    python bench/fp8_gpu_check.py --host     # smoke run of checks 1-3 on the CPU through oarlock-cuda's host
                                             # emulation (small shapes, the model in place of the MMA, no timing)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

FORMATS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]
TC_UNIT = 2.0 ** -13          # the MMA's accumulation precision allowed (about 14 bits: DeepSeek-V3, Hopper)
F32_UNIT = 2.0 ** -24


def report(ok: bool, text: str) -> int:
    print(f"{'ok  ' if ok else 'FAIL'} {text}")
    return 0 if ok else 1


def check_quant(xp, fp8_ops, size) -> int:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal([size, size]) * np.exp(rng.uniform(-8, 8, [size, 1]))).astype(np.float32)
    x[0, :128], x[1, 5], x[2, 7], x[3, :128] = 0, np.inf, np.nan, 1e-37
    failures = 0
    for method in ("1x128", "128x128"):
        for pow2, eps, fmt in ((True, 0.0, "e4m3"), (False, 1e-3, "e4m3"), (True, 0.0, "e5m2")):
            codes, decode = (to_host(xp, v) for v in fp8_ops.quant_gpu(xp, xp.asarray(x), method, eps, pow2, fmt))
            want_codes, want_decode = fp8_ops.quant_generic(np, x, method, eps, pow2, fmt)
            nan = np.isnan(fp8_ops._decode_codes(want_codes, fmt))
            ok = (np.array_equal(decode, want_decode) and np.array_equal(
                np.isnan(fp8_ops._decode_codes(codes, fmt)), nan)
                and np.array_equal(np.where(nan, 0, codes), np.where(nan, 0, want_codes)))
            failures += report(ok, f"quant {method} pow2={pow2} eps={eps} {fmt} {size}x{size}: bit-exact")
    return failures


def finite_codes(rng, shape, fmt):
    top = 0x7E if fmt == "e4m3" else 0x7B          # the largest finite code
    return (rng.integers(0, top + 1, shape) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def decode(fp8_ops, codes, fmt):
    return fp8_ops._decode_codes(codes, fmt).astype(np.float64)


def check_probe(xp, fp8_ops, fp8_tc, instruction) -> int:
    rng = np.random.default_rng(1)
    failures = 0
    for a_fmt, b_fmt in FORMATS:
        a, b = finite_codes(rng, [16, 32], a_fmt), finite_codes(rng, [32, 8], b_fmt)
        c = rng.standard_normal([16, 8]).astype(np.float32)
        da, db = decode(fp8_ops, a, a_fmt), decode(fp8_ops, b, b_fmt)
        want, scale = c + da @ db, np.abs(c) + np.abs(da) @ np.abs(db)
        for model, unit in ((False, 4 * TC_UNIT), (True, 33 * F32_UNIT)):
            if not model and not instruction:
                continue
            got = fp8_tc.mma_probe(xp, a, b, c, a_fmt, b_fmt, model=model)
            ratio = float(np.max(np.abs(got - want) / scale))
            what = "model of the MMA" if model else "mma.sync m16n8k32"
            failures += report(ratio <= unit, f"{what} {a_fmt} x {b_fmt} on the PTX layout table: max |err| / "
                                              f"sum|c, ab| = {ratio:.2e} (allowed {unit:.1e})")
    return failures


def operands(fp8_ops, m, n, k, a_fmt, b_fmt, seed=2):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal([m, k]) * np.exp(rng.uniform(-4, 4, [m, 1]))).astype(np.float32)
    w = (rng.standard_normal([n, k]) * np.exp(rng.uniform(-4, 4, [n, 1]))).astype(np.float32)
    qa, sa = fp8_ops.quant_generic(np, x, "1x128", 0.0, True, a_fmt)     # fp8_quant_blockwise's kernel
    qb, sb = fp8_ops.quant_generic(np, w, "1x128", 0.0, True, b_fmt)
    return qa, sa, qb, sb


def check_gemm(xp, fp8_ops, shapes, instruction) -> int:
    failures = 0
    for (m, n, k), (a_fmt, b_fmt) in zip(shapes, FORMATS):
        qa, sa, qb, sb = operands(fp8_ops, m, n, k, a_fmt, b_fmt)
        kb = -(-k // 128)
        da = decode(fp8_ops, qa, a_fmt) * np.repeat(sa, 128, axis=1)[:, :k]
        db = decode(fp8_ops, qb, b_fmt) * np.repeat(sb, 128, axis=1)[:, :k]
        want, scale = da @ db.T, np.abs(da) @ np.abs(db).T
        args = [xp.asarray(v) for v in (qa, sa, qb, sb)]
        run = {name: to_host(xp, fp8_ops.gemm_gpu(xp, *args, a_fmt, b_fmt, kernel=kernel, mma_model=model))
               for name, kernel, model in (("core", fp8_ops.CORE_GEMM, False), ("model", fp8_ops.TC_GEMM, True),
                                           ("tc", fp8_ops.TC_GEMM, False))}
        shape = f"{m}x{n}x{k} {a_fmt} x {b_fmt}"
        ratio = {name: float(np.max(np.abs(out - want) / np.maximum(scale, 1e-300))) for name, out in run.items()}
        f32 = (128 + kb) * F32_UNIT
        failures += report(ratio["core"] <= f32, f"gemm fp8_gemm_rows {shape}: max |err| / sum|ab| = "
                                                 f"{ratio['core']:.2e} (float32 bound {f32:.1e})")
        failures += report(np.array_equal(run["model"], run["core"]),
                           f"gemm fp8_gemm_tc with the MMA's model {shape}: bit-equal to fp8_gemm_rows")
        tc = 8 * TC_UNIT + f32
        if not instruction:
            continue
        failures += report(ratio["tc"] <= tc, f"gemm fp8_gemm_tc {shape}: max |err| / sum|ab| = {ratio['tc']:.2e} "
                                              f"(allowed {tc:.1e}); default kernel here: "
                                              f"{fp8_ops.gemm_kernel_for(0)}")
    return failures


def median_seconds(cupy, fn, repeats=10, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def bench_shape(cupy, fp8_ops, m, n, k) -> str:
    qa, sa, qb, sb = (cupy.asarray(v) for v in operands(fp8_ops, m, n, k, "e4m3", "e4m3"))
    x16 = cupy.asarray(np.random.default_rng(3).standard_normal([m, k]), cupy.float16)
    w16 = cupy.asarray(np.random.default_rng(4).standard_normal([k, n]), cupy.float16)
    runs = (("fp8_gemm_tc", lambda: fp8_ops.gemm_gpu(cupy, qa, sa, qb, sb, kernel=fp8_ops.TC_GEMM), 10),
            ("fp8_gemm_rows", lambda: fp8_ops.gemm_gpu(cupy, qa, sa, qb, sb, kernel=fp8_ops.CORE_GEMM), 3),
            ("cuBLAS fp16 matmul", lambda: cupy.matmul(x16, w16), 10))
    line = []
    for name, fn, repeats in runs:
        seconds = median_seconds(cupy, fn, repeats=repeats)
        line.append(f"{name} {seconds * 1e3:.2f} ms = {2.0 * m * n * k / seconds / 1e12:.1f} TFLOP/s")
    return f"speed {m}x{n}x{k}: " + "; ".join(line)


def to_host(xp, v):
    return xp.asnumpy(v) if hasattr(xp, "asnumpy") else np.asarray(v)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", action="store_true", help="checks 1-3 on the CPU through the host emulation")
    args = parser.parse_args()
    from oarlock_incubate import fp8_ops, fp8_tc

    gemm_shapes = [(1000, 776, 1040), (520, 392, 1000), (256, 128, 384), (300, 200, 136)]
    if args.host:
        import tempfile

        from oarlock_cuda import emulation
        fp8_ops.RUNTIME = emulation.HostRuntime(tempfile.mkdtemp(prefix="fp8emu"), fp8_ops.source,
                                                lambda family: fp8_ops.KERNELS)
        fp8_ops.RUNTIME.compute_capability = lambda device: 90
        xp, quant_size, gemm_shapes = np, 300, [(136, 72, 272), (72, 136, 200), (40, 24, 160), (24, 40, 130)]
        print("host emulation: the checks of the instruction run fp8_tc.cu's model of it; no timing")
    else:
        import cupy as xp
        quant_size = 1000
        print(f"device: {xp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, compute capability "
              f"{xp.cuda.Device(0).compute_capability}")
    # below sm_89 fp8_tc.cu compiles the model in place of the instruction: nothing of the instruction to check
    instruction = fp8_ops.gemm_kernel_for(0) == fp8_ops.TC_GEMM
    if not instruction:
        print("this GPU is below sm_89: no FP8 tensor-core instruction; its checks and timings are skipped")
    failures = check_quant(xp, fp8_ops, quant_size) + check_probe(xp, fp8_ops, fp8_tc, instruction)
    failures += check_gemm(xp, fp8_ops, gemm_shapes, instruction)
    if not args.host and instruction:
        for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
            print(bench_shape(xp, fp8_ops, m, n, k))
    print("all checks passed" if not failures else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
