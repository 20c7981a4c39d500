"""The internal ops behind fp8_quant_blockwise and fp8_gemm_blockwise, so that each device runs its own kernel:

- fp8_quant_op(x, method, epsilon, pow2, fmt) -> (codes uint8 [M, K], decode scales float32 in the natural
  layout: [M, ceil(K/128)] for "1x128", [ceil(M/128), ceil(K/128)] for "128x128");
- fp8_gemm_op(a, a_scale, b, b_scale, a_fmt, b_fmt) -> float32 [M, N]: codes a [M, K], b [N, K] with decode
  scales per row and 128-block of K ([M, kb], [N, kb]).

Float8 values travel as their byte codes: the gpu device (CuPy) has no float8 arrays. The generic kernels are
fp8_numerics' numpy emulation; the "gpu" kernels are kernels/fp8.cu (fp8_quant_rows, fp8_quant_tiles,
fp8_gemm_rows: CUDA cores) and kernels/fp8_tc.cu (fp8_gemm_tc: the tensor cores' mma.sync m16n8k32 on float8,
the GEMM's default where the device's compute capability is 8.9 or more; fp8_gemm_rows below that), compiled
at first use by NVRTC through cupy.RawModule and launched through `RUNTIME`, which the tests replace by
oarlock-cuda's host emulation to run the same source on numpy arrays. Neither op is
differentiable (FP8 training differentiates Fp8Linear, not the quantizer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oarlock_incubate import fp8_numerics as fp8

QUANT_OP, GEMM_OP = "fp8_quant_op", "fp8_gemm_op"
SOURCES = [Path(__file__).with_name("kernels") / name for name in ("fp8.cu", "fp8_tc.cu")]   # one module
CORE_GEMM, TC_GEMM = "fp8_gemm_rows", "fp8_gemm_tc"
TC_NAMES = {False: "fp8_gemm_tc<false>", True: "fp8_gemm_tc<true>"}    # the instruction / fp8_tc.cu's model of it
PROBES = {False: "fp8_mma_probe<false>", True: "fp8_mma_probe<true>"}  # one MMA (fp8_tc.py's layout check)
KERNELS = ["fp8_quant_rows", "fp8_quant_tiles", CORE_GEMM, *TC_NAMES.values(), *PROBES.values()]
TENSOR_CORE_CAPABILITY = 89     # mma.sync m16n8k32 on e4m3 / e5m2: sm_89 (Ada), sm_90 (Hopper) and later
OPTIONS = ("--std=c++17", "--fmad=false")     # no fused multiply-add: the products round as the numpy kernels'
GPU_DTYPES = ("float16", "float32")
_quant = _gemm = None   # the callables ops.define returned


def source(family: str = "fp8") -> str:
    return "\n".join(path.read_text() for path in SOURCES)


class CupyRuntime:
    """Compiles kernels/fp8.cu once per device with NVRTC and launches on the current stream (the interface of
    oarlock-cuda's runtimes: function(family, name, device), launch(fn, device, grid, block, args))."""

    def __init__(self):
        self.functions: dict = {}

    def function(self, family: str, name: str, device: int):
        key = (name, device)
        if key not in self.functions:
            import cupy
            with cupy.cuda.Device(device):
                module = self.functions.get(("module", device))
                if module is None:
                    module = self.functions[("module", device)] = cupy.RawModule(
                        code=source(family), options=OPTIONS, name_expressions=KERNELS)
                self.functions[key] = module.get_function(name)
        return self.functions[key]

    @staticmethod
    def device_of(array) -> int:
        return array.device.id

    @staticmethod
    def compute_capability(device: int) -> int:
        import cupy
        return int(cupy.cuda.Device(device).compute_capability)     # "90" on sm_90

    @staticmethod
    def launch(fn, device, grid, block, args):
        import cupy
        with cupy.cuda.Device(device):
            fn(grid, block, args)


RUNTIME = CupyRuntime()


def _run(name, like, grid, block, args):
    device = RUNTIME.device_of(like)
    RUNTIME.launch(RUNTIME.function("fp8", name, device), device, grid, block, args)


def gemm_kernel_for(device: int) -> str:
    """The GEMM kernel for a device: the tensor-core one from compute capability 8.9 on, the CUDA-core one below
    (and on a runtime that cannot tell a device's capability, such as the host emulation)."""
    capability = getattr(RUNTIME, "compute_capability", None)
    if capability is None:
        return CORE_GEMM
    return TC_GEMM if capability(device) >= TENSOR_CORE_CAPABILITY else CORE_GEMM


# -- generic (numpy) kernels ---------------------------------------------------------------------------------

def quant_generic(xp, x, method="1x128", epsilon=0.0, pow2=True, fmt="e4m3"):
    x32 = np.asarray(x, np.float32)
    q, decode = (fp8.quantize_rows if method == "1x128" else fp8.quantize_tiles)(x32, epsilon, pow2, fmt)
    return q.view(np.uint8), decode


def _decode_codes(codes, fmt):
    return fp8.to_float32(np.asarray(codes, np.uint8).view(fp8.FORMATS[fmt]))


def gemm_generic(xp, a, a_scale, b, b_scale, a_fmt="e4m3", b_fmt="e4m3"):
    return fp8.blockwise_matmul(_decode_codes(a, a_fmt), np.asarray(a_scale, np.float32), _decode_codes(b, b_fmt),
                            np.asarray(b_scale, np.float32))


# -- gpu kernels (kernels/fp8.cu, kernels/fp8_tc.cu) --------------------------------------------------------

def quant_gpu(xp, x, method="1x128", epsilon=0.0, pow2=True, fmt="e4m3"):
    x32 = xp.ascontiguousarray(x.astype(xp.float32))
    rows, cols = x32.shape
    q = xp.empty((rows, cols), xp.uint8)
    kb = fp8.blocks(cols)
    attrs = (np.int64(rows), np.int64(cols), np.float32(epsilon), np.int32(bool(pow2)), np.int32(fmt == "e5m2"))
    if method == "1x128":
        decode = xp.empty((rows, kb), xp.float32)
        _run("fp8_quant_rows", x32, (kb, max(1, min(rows, 65535))), (32,), (x32, q, decode, *attrs))
    else:
        decode = xp.empty((fp8.blocks(rows), kb), xp.float32)
        _run("fp8_quant_tiles", x32, (kb, fp8.blocks(rows)), (256,), (x32, q, decode, *attrs))
    return q, decode


def gemm_gpu(xp, a, a_scale, b, b_scale, a_fmt="e4m3", b_fmt="e4m3", kernel=None, mma_model=False):
    """kernel: CORE_GEMM or TC_GEMM (None: gemm_kernel_for the device); mma_model: TC_GEMM runs fp8_tc.cu's
    shuffle model of the MMA instead of the instruction (a check of the fragment layout on a GPU)."""
    (m, k), n = a.shape, b.shape[0]
    out = xp.empty((m, n), xp.float32)
    if m == 0 or n == 0:
        return out                  # no grid to launch (an empty K gives zeros from either kernel)
    kernel = kernel or gemm_kernel_for(RUNTIME.device_of(out))
    args = (xp.ascontiguousarray(a), xp.ascontiguousarray(a_scale, dtype=xp.float32), xp.ascontiguousarray(b),
            xp.ascontiguousarray(b_scale, dtype=xp.float32), out, np.int64(m), np.int64(n), np.int64(k),
            np.int32(a_fmt == "e5m2"), np.int32(b_fmt == "e5m2"))
    if kernel == TC_GEMM:
        _run(TC_NAMES[bool(mma_model)], out, (fp8.blocks(n), fp8.blocks(m)), (256,), args)
    elif kernel == CORE_GEMM:
        _run(CORE_GEMM, out, (fp8.blocks(n, 16), fp8.blocks(m, 16)), (16, 16), args)
    else:
        raise ValueError(f"fp8_ops.gemm_gpu(): argument 'kernel' = {kernel!r}; accepted: {CORE_GEMM!r}, "
                         f"{TC_GEMM!r} or None")
    return out


def quant(x, method, epsilon, pow2, fmt):
    return _quant(x, method, epsilon, pow2, fmt)


def gemm(a, a_scale, b, b_scale, a_fmt, b_fmt):
    return _gemm(a, a_scale, b, b_scale, a_fmt, b_fmt)


def register(ops):
    """Define fp8_quant_op and fp8_gemm_op, their generic kernels and their "gpu" kernels."""
    global _quant, _gemm
    _quant = ops.define(
        f"{QUANT_OP}(x: Tensor, method: str = '1x128', epsilon: float = 0.0, pow2: bool = True, "
        "fmt: str = 'e4m3') -> tuple[Tensor, Tensor]", internal=True, dtypes=("float",),
        doc="Blockwise float8 quantization: (uint8 codes, decode scales); the public API is "
            "oarlock.incubate.nn.functional.fp8_quant_blockwise.")
    _gemm = ops.define(
        f"{GEMM_OP}(a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, a_fmt: str = 'e4m3', "
        "b_fmt: str = 'e4m3') -> Tensor", internal=True,
        doc="Blockwise-scaled float8 GEMM of uint8 codes, float32 out; the public API is "
            "oarlock.incubate.nn.functional.fp8_gemm_blockwise.")
    ops.kernel(QUANT_OP)(quant_generic)
    ops.kernel(GEMM_OP)(gemm_generic)
    ops.kernel(QUANT_OP, device="gpu", dtypes=GPU_DTYPES)(quant_gpu)
    ops.kernel(GEMM_OP, device="gpu")(gemm_gpu)
