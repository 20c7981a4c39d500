"""FlashMask attention on the GPU: fused CUDA kernels (cuda/fwd.cu, cuda/bwd.cu) for device "gpu".

The kernel family "flashmask" is one CUDA source: oarlock_cuda's prelude.cuh (16-bit storage types) and
tensor_core.cuh (mma.sync, ldmatrix, cp.async), then cuda/mask.cuh (the mask and the tile classes), cuda/fwd.cu
(the pre-pass fm_block_stats and the forward fm_fwd<T, D>) and cuda/bwd.cu with the backward's name expressions
from oarlock_flashmask.gpu_backward. It is compiled at first use with NVRTC through
`cupy.RawModule(code, options=OPTIONS, name_expressions=names())` (cupy adds -arch for the current device) and
cached per device.

`flashmask_forward_gpu` is the forward kernel of "flashmask_attention_op" for device "gpu" and the dtypes
bfloat16 and float16. It runs the fused kernels when query, key and value share a dtype of CTYPES, the head dim
is 64 or 128 (Dv == D), dropout is 0 and nothing is empty; otherwise it calls the generic
kernel.flashmask_forward with the same arguments, so behaviour and error messages stay the generic ones. On the
fused path the inputs are validated by the generic kernel.check_inputs first (the same errors), and it returns
what the generic kernel returns: out [B, Sq, Hq, D] of the inputs' dtype, lse [B, Hq, Sq] float32 and the
seed_offset int64 [2] (the fixed_seed_offset's values, else (0, 0)).

The array module is taken from the inputs (cupy arrays on the GPU; numpy arrays when the tests swap RUNTIME for
oarlock_cuda.emulation.HostRuntime, which runs the same kernels compiled for the host). Registration imports
neither cupy nor oarlock_cuda.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from oarlock_flashmask import kernel

CUDA_DIR = Path(__file__).with_name("cuda")
FAMILY = "flashmask"
OPTIONS = ("--std=c++17",)                     # NVRTC; cupy adds -arch=sm_XX for the device it compiles for
DEVICE = "gpu"
DTYPES = ("bfloat16", "float16")               # the dtypes the kernels are registered for
CTYPES = {"bfloat16": "bf16_t", "float16": "half_t"}
HEAD_DIMS = (64, 128)
BLOCK_M = 64                                   # query rows per CTA (fwd.cu's FM_BLOCK_M)
BLOCK_N = 64                                   # keys per tile and per pre-pass block (FM_BLOCK_N)
THREADS = 128                                  # 4 warps
STATS_THREADS = 256
STATS_MAX_BLOCKS = 4096
MAX_C = 4
SMEM_DEFAULT_LIMIT = 48 * 1024                 # above this a kernel needs the opt-in attribute
_OP = "flashmask_attention_op"
_GRAD = "flashmask_attention_grad"


def smem_bytes(d: int) -> int:
    """fm_fwd's dynamic shared memory: K and V double buffers of 64 rows of D + 8 elements, mask vectors."""
    return 4 * BLOCK_N * (d + 8) * 2 + 2 * BLOCK_N * MAX_C * 4


# -- the kernel family --------------------------------------------------------------------------------------

def forward_names() -> list[str]:
    return ["fm_block_stats"] + [f"fm_fwd<{c}, {d}>" for c in CTYPES.values() for d in HEAD_DIMS]


def names(family: str = FAMILY) -> list[str]:
    """The name expressions NVRTC instantiates: the forward's, then the backward's."""
    from oarlock_flashmask import gpu_backward   # imported here: it imports this module's runtime lazily too
    return forward_names() + gpu_backward.NAME_EXPRESSIONS


def source(family: str = FAMILY) -> str:
    """The family's CUDA source as compiled (self-contained: no #include)."""
    from oarlock_cuda import kernel_dir    # the extra "cuda": only a "gpu" device (oarlock-cuda's) runs this
    headers = kernel_dir()
    parts = [headers / "prelude.cuh", headers / "tensor_core.cuh", CUDA_DIR / "mask.cuh", CUDA_DIR / "fwd.cu",
             CUDA_DIR / "bwd.cu"]
    return "\n".join(p.read_text() for p in parts)


# -- loading and launching ------------------------------------------------------------------------------------

class CupyRuntime:
    """Compiles the family once per device with NVRTC (cupy.RawModule) and launches on the current stream with
    dynamic shared memory (raising the kernel's limit above 48 KB)."""

    def __init__(self):
        self.functions: dict = {}        # (family, name, device id) -> cupy RawKernel; (family, None, id) -> module
        self.smem_limit: dict = {}       # id(RawKernel) -> the dynamic shared memory limit set on it

    def function(self, family: str, name: str, device: int):
        key = (family, name, device)
        fn = self.functions.get(key)
        if fn is None:
            import cupy
            with cupy.cuda.Device(device):
                module = self.functions.get((family, None, device))
                if module is None:
                    module = self.functions[(family, None, device)] = cupy.RawModule(
                        code=source(family), options=OPTIONS, name_expressions=names(family))
                fn = self.functions[key] = module.get_function(name)
        return fn

    @staticmethod
    def device_of(array) -> int:
        return array.device.id

    def launch(self, fn, device, grid, block, args, shared_bytes=0):
        import cupy
        if cupy.cuda.runtime.getDevice() == device:
            self._launch(fn, grid, block, args, shared_bytes)
        else:
            with cupy.cuda.Device(device):
                self._launch(fn, grid, block, args, shared_bytes)

    def _launch(self, fn, grid, block, args, shared_bytes):
        if shared_bytes > SMEM_DEFAULT_LIMIT and self.smem_limit.get(id(fn), 0) < shared_bytes:
            fn.max_dynamic_shared_size_bytes = shared_bytes   # the opt-in above 48 KB (once per kernel)
            self.smem_limit[id(fn)] = shared_bytes
        fn(tuple(grid), tuple(block), tuple(args), shared_mem=shared_bytes)


RUNTIME = CupyRuntime()


def _array_module(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy.get_array_module(a)


# -- the forward ------------------------------------------------------------------------------------------------

def _fused(query, key, value, dropout) -> bool:
    """Whether the fused kernels take these inputs (the generic kernel validates and runs the others)."""
    if not all(getattr(a, "ndim", None) == 4 for a in (query, key, value)):
        return False
    name = query.dtype.name
    if name not in CTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        return False
    d = query.shape[3]
    if d not in HEAD_DIMS or key.shape[3] != d or value.shape[3] != d:
        return False
    if not isinstance(dropout, (int, float)) or dropout != 0:
        return False
    b, sq, hq = query.shape[:3]
    sk, hk = key.shape[1:3]
    return min(b, sq, hq, sk, hk) > 0 and b <= 65535 and hq <= 65535 and sq + sk < 2 ** 30


def _window(w, sq, sk):
    """A window side as the kernel takes it: -1 (unbounded), else at most Sk + Sq (which bounds nothing)."""
    return np.int32(-1 if w < 0 else min(w, sk + sq))


def forward(xp, query, key, value, startend_row_indices=None, causal=False, window_left=-1, window_right=-1,
            softmax_scale=None, *, ctype=None, tile_counts=None, out=None, lse=None):
    """The fused forward on validated inputs: (out [B, Sq, Hq, D], lse [B, Hq, Sq] float32). `ctype`: the
    kernel's element type (bf16_t / half_t) when the arrays' dtype does not say it (e.g. int16 views of
    bfloat16 data); `tile_counts`: an int32 [B, Hq, ceil(Sq / 64), 2] array that receives the (FULL, PARTIAL)
    key tiles each CTA computed (the skipped ones are neither); `out`, `lse`: contiguous arrays to write
    (else new ones)."""
    q, k, v = (xp.ascontiguousarray(a) for a in (query, key, value))
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    ctype = ctype or CTYPES[q.dtype.name]
    scale = kernel._scale(softmax_scale, d)
    nqb, nkb = -(-sq // BLOCK_M), -(-sk // BLOCK_N)
    device = RUNTIME.device_of(q)
    dummy = xp.zeros((1,), dtype=xp.int32)
    if startend_row_indices is not None:
        sri = xp.ascontiguousarray(startend_row_indices)
        hm, c = sri.shape[1], sri.shape[3]
        bmin, bmax = block_stats(xp, sri, nkb, device)
    else:
        sri = bmin = bmax = dummy
        hm, c = 1, 1
    out = xp.empty(q.shape, dtype=q.dtype) if out is None else out
    lse = xp.empty((b, hq, sq), dtype=xp.float32) if lse is None else lse
    counts = dummy if tile_counts is None else tile_counts
    fn = RUNTIME.function(FAMILY, f"fm_fwd<{ctype}, {d}>", device)
    RUNTIME.launch(fn, device, (nqb, hq, b), (THREADS,),
                   (q, k, v, sri, bmin, bmax, out, lse, counts, np.int32(sq), np.int32(sk), np.int32(hq),
                    np.int32(hk), np.int32(hm), np.int32(c), np.int32(startend_row_indices is not None),
                    np.int32(bool(causal)), _window(window_left, sq, sk), _window(window_right, sq, sk),
                    np.float32(scale * math.log2(math.e)), np.int32(nkb), np.int32(tile_counts is not None)),
                   shared_bytes=smem_bytes(d))
    return out, lse


def block_stats(xp, sri, nkb, device=None):
    """The pre-pass: (bmin, bmax) int32 [B, Hm, nkb, C], the min and max of each vector over each key block of
    BLOCK_N columns (the last one partial), from contiguous int32 startend_row_indices [B, Hm, Sk, C]."""
    b, hm, sk, c = sri.shape
    bmin = xp.empty((b, hm, nkb, c), dtype=xp.int32)
    bmax = xp.empty((b, hm, nkb, c), dtype=xp.int32)
    total = b * hm * nkb * c
    if total:
        device = RUNTIME.device_of(sri) if device is None else device
        blocks = max(1, min(-(-total // STATS_THREADS), STATS_MAX_BLOCKS))
        RUNTIME.launch(RUNTIME.function(FAMILY, "fm_block_stats", device), device, (blocks,), (STATS_THREADS,),
                       (sri, bmin, bmax, np.int32(b * hm), np.int32(sk), np.int32(c), np.int32(nkb)))
    return bmin, bmax


def flashmask_forward_gpu(query, key, value, startend_row_indices=None, fixed_seed_offset=None, dropout=0.0,
                          causal=False, window_left=-1, window_right=-1, softmax_scale=None, *, generator=None,
                          xp=None):
    """kernel.flashmask_forward without `xp` (taken from the inputs): (out, lse, seed_offset), fused where
    `_fused` allows, else the generic kernel."""
    xp = _array_module(query) if xp is None else xp
    if not _fused(query, key, value, dropout):
        return kernel.flashmask_forward(xp, query, key, value, startend_row_indices, fixed_seed_offset, dropout,
                                        causal, window_left, window_right, softmax_scale, generator=generator)
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    kernel.check_inputs(xp, query, key, value, startend_row_indices, causal, window)
    seed, offset = kernel._seed(xp, fixed_seed_offset, 0.0, generator)
    out, lse = forward(xp, query, key, value, startend_row_indices, causal, window_left, window_right, softmax_scale)
    so = xp.asarray([seed if seed < 2 ** 63 else seed - 2 ** 64, offset if offset < 2 ** 63 else offset - 2 ** 64],
                    dtype=xp.int64)
    return out, lse, so


def _forward_kernel(xp, query, key, value, startend_row_indices=None, fixed_seed_offset=None, dropout=0.0,
                    causal=False, window_left=-1, window_right=-1, softmax_scale=None, *, generator=None):
    """The registered kernel (the dispatcher passes xp first)."""
    return flashmask_forward_gpu(query, key, value, startend_row_indices, fixed_seed_offset, dropout, causal,
                                 window_left, window_right, softmax_scale, generator=generator, xp=xp)


# -- registration -------------------------------------------------------------------------------------------------

def register(ops):
    """Register the fused kernels for device "gpu" and the bfloat16 and float16 dtypes: the forward of
    flashmask_attention_op and the backward of flashmask_attention_grad. Imports no cupy."""
    from oarlock_flashmask import gpu_backward
    ops.kernel(_OP, device=DEVICE, dtypes=DTYPES)(_forward_kernel)
    ops.kernel(_GRAD, device=DEVICE, dtypes=DTYPES)(gpu_backward.backward_kernel)
