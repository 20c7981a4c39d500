"""Fused CUDA kernels for device "gpu": one kernel where the generic array-API kernels make several passes.

| op(s)                                | kernel (kernels/*.cu)              | fused when                              |
|--------------------------------------|------------------------------------|-----------------------------------------|
| softmax, softmax_compat, log_softmax | softmax_fwd, log_softmax_fwd       | the last axis, no dtype= change         |
| cross_entropy                        | cross_entropy_fwd (+ one sum)      | hard int32/int64 labels, softmax, class |
|                                      |                                    | axis last, no label smoothing           |
| layer_norm, rms_norm                 | layer_norm_fwd, rms_norm_fwd       | always (non-empty)                      |
| _normalize_grad (their backward)     | norm_bwd_rows + norm_bwd_cols      | the [rows, n] plan of layer/rms norm    |
| gelu                                 | gelu_fwd (erf and tanh forms)      | always                                  |
| fused_rotary_embedding               | rotary_fwd (and its transpose)     | cos/sin need at most 3 leading strides  |
| dropout                              | dropout_fwd (out, mask in one pass)| training, 0 < p < 1, no axis            |
| adam_step_ (Adam and AdamW)          | adam_step (in place, bit-exact)    | all arrays one dtype and contiguous     |
| moe_gate_dispatch_op (oarlock-       | moe_topk, moe_rank, moe_scatter    | float32 gate_logits (and corr_bias)     |
| incubate's moe_gate_dispatch)        |                                    |                                         |
| moe_combine_op (moe_combine)         | moe_combine_fwd                    | weights of x's dtype, int32 index       |
| moe_combine_grad_op (its backward)   | moe_combine_bwd                    | and no row of x named by 2 live slots   |
| fused_bias_act_op (incubate's        | bias_act_fwd                       | x and bias of one dtype                 |
| fused_bias_act)                      |                                    |                                         |
| fused_partial_rope_op (incubate's    | partial_rope_fwd (and transpose)   | x, cos, sin of one dtype                |
| fused_partial_rope)                  |                                    |                                         |

Each kernel takes float32, float16 and bfloat16 arrays (the dtypes it is registered for; float64 keeps the
generic kernel) and accumulates in float32. It returns exactly what the generic kernel of the op returns:
the same outputs, intermediate outputs (the norms' float32 mean and rstd, the dropout mask), shapes and
dtypes; for every option it does not fuse it calls that generic kernel, so behaviour and error messages
stay the generic ones. cross_entropy reads one number back (the first out-of-range label, if any) to raise
the generic kernel's IndexError, the one host sync the generic kernel also makes.

The CUDA sources are self-contained (no #include: 16-bit types are converted by hand), one file per
family, compiled at first use by NVRTC through `cupy.RawModule(code, options=OPTIONS, name_expressions=...)`
and cached per device; `--fmad=false` keeps the elementwise arithmetic in the generic kernels' rounding
(Adam's step is then the CPU generic (numpy) step to the bit). Nothing here imports cupy until a kernel runs:
registration only records Python functions for device "gpu".

The launch goes through `RUNTIME` (module loading, the current device, the launch), which the tests
replace to run the same kernels, compiled for the host, on numpy arrays.
"""

from __future__ import annotations

import math
import weakref
from pathlib import Path

import numpy as np

KERNEL_DIR = Path(__file__).with_name("kernels")
OPTIONS = ("--std=c++17", "--fmad=false")
DEVICE = "gpu"
DTYPES = ("float32", "float16", "bfloat16")                     # the dtypes the kernels are registered for
CTYPES = {"float32": "float", "float16": "half_t", "bfloat16": "bf16_t"}
LABEL_CTYPES = {"int32": "int", "int64": "long long"}
BLOCK = 256                                                     # threads per block of the elementwise kernels
MAX_GRID = 65536                                                # blocks of a grid-stride launch
NORM_CHUNKS = 256                                               # at most this many row chunks in norm_bwd_cols
_NO_ROW = np.iinfo(np.uint64).max


def _names(template, extra=None):
    if extra is None:
        return [f"{template}<{c}>" for c in CTYPES.values()]
    return [f"{template}<{c}, {e}>" for c in CTYPES.values() for e in extra.values()]


# family -> (source file, the template instantiations NVRTC is asked for)
FAMILIES = {
    "softmax": ("softmax.cu", _names("softmax_fwd") + _names("log_softmax_fwd")
                + _names("cross_entropy_fwd", LABEL_CTYPES)),
    "norm": ("norm.cu", _names("layer_norm_fwd") + _names("rms_norm_fwd") + _names("norm_bwd_rows")
             + _names("norm_bwd_cols")),
    "activation": ("activation.cu", _names("gelu_fwd")),
    "rotary": ("rotary.cu", _names("rotary_fwd")),
    "dropout": ("dropout.cu", _names("dropout_fwd")),
    "optim": ("optim.cu", _names("adam_step")),
    "moe": ("moe.cu", ["moe_topk", "moe_rank"] + _names("moe_scatter") + _names("moe_combine_fwd")
            + _names("moe_combine_bwd")),
    "partial_rope": ("partial_rope.cu", _names("partial_rope_fwd")),
    "bias_act": ("bias_act.cu", _names("bias_act_fwd")),
}


def source(family: str) -> str:
    """A family's CUDA source as compiled: the shared prelude (16-bit float conversions) and its .cu file."""
    return (KERNEL_DIR / "prelude.cuh").read_text() + "\n" + (KERNEL_DIR / FAMILIES[family][0]).read_text()


# -- loading and launching ---------------------------------------------------------------------------

class CupyRuntime:
    """Compiles each family once per device with NVRTC (cupy.RawModule) and launches on the current stream."""

    def __init__(self):
        self.functions: dict = {}        # (family, name, device id) -> cupy RawKernel

    def function(self, family: str, name: str, device: int):
        key = (family, name, device)
        fn = self.functions.get(key)
        if fn is None:
            import cupy
            with cupy.cuda.Device(device):
                module = self._module(cupy, family, device)
                fn = self.functions[key] = module.get_function(name)
        return fn

    def _module(self, cupy, family, device):
        key = (family, None, device)
        module = self.functions.get(key)
        if module is None:
            module = self.functions[key] = cupy.RawModule(code=source(family), options=OPTIONS,
                                                          name_expressions=FAMILIES[family][1])
        return module

    @staticmethod
    def device_of(array) -> int:
        return array.device.id

    @staticmethod
    def launch(fn, device, grid, block, args):
        import cupy
        if cupy.cuda.runtime.getDevice() == device:
            fn(grid, block, args)
        else:
            with cupy.cuda.Device(device):
                fn(grid, block, args)


RUNTIME = CupyRuntime()


def _run(family, template, ctype, like, grid, block, args):
    device = RUNTIME.device_of(like)
    name = template if ctype is None else f"{template}<{ctype}>"   # None: a kernel that is not a template
    RUNTIME.launch(RUNTIME.function(family, name, device), device, grid, block, args)


# -- helpers ---------------------------------------------------------------------------------------------

class _Generic:
    """The generic (array-API) kernel of an op: from the default registry, else from a registry these kernels
    were registered in (tests build isolated ones). They are the same functions in every registry."""

    def __init__(self):
        self.registries = weakref.WeakSet()
        self.kernels: dict = {}

    def __call__(self, op):
        fn = self.kernels.get(op)
        if fn is None:
            from oarlock.registry import default_registry
            for registry in [default_registry(), *list(self.registries)]:
                found = registry.kernels.get((op, None, None))
                if found is not None:
                    fn = self.kernels[op] = found[0]
                    break
            else:
                raise NotImplementedError(f"oarlock_cuda: op {op!r} needs its generic kernel for this input, and no "
                                          f"installed plugin registers one (is oarlock-ops installed?)")
        return fn


GENERIC = _Generic()


def _ctype(*arrays):
    """The kernel type name when every array has one of DTYPES and the same dtype, else None."""
    name = arrays[0].dtype.name
    if name not in CTYPES or any(a.dtype != arrays[0].dtype for a in arrays[1:]):
        return None
    return CTYPES[name]


def _row_threads(n):
    """A power of two from 32 to 1024, at least n where possible."""
    threads = 32
    while threads < n and threads < 1024:
        threads *= 2
    return threads


def _grid(n):
    return (max(1, min(-(-n // BLOCK), MAX_GRID)),)


def _i64(v):
    return np.int64(v)


def _f32(v):
    return np.float32(v)


def _flat(xp, a):
    return xp.ascontiguousarray(a).reshape(-1)


# -- softmax, log_softmax -----------------------------------------------------------------------------------

def _implicit_axis(axis, ndim):
    """softmax_compat's dim=None (torch's legacy rule), as the generic kernel applies it."""
    if axis is None:
        return 0 if ndim in (0, 1, 3) else 1
    return axis


def _softmax_kernel(op, template):
    def kernel(xp, x, axis=-1, dtype=None):
        nd = x.ndim
        ax = _implicit_axis(axis, nd)
        ctype = _ctype(x)
        if (ctype is None or nd == 0 or x.size == 0 or not -nd <= ax < nd or ax % nd != nd - 1
                or (dtype is not None and np.dtype(dtype) != x.dtype)):
            return GENERIC(op)(xp, x, axis=axis, dtype=dtype)
        n = x.shape[-1]
        src = xp.ascontiguousarray(x)
        out = xp.empty(x.shape, dtype=x.dtype)
        _run("softmax", template, ctype, src, (x.size // n,), (_row_threads(n),), (src, out, _i64(n)))
        return out
    return kernel


# -- cross_entropy ---------------------------------------------------------------------------------------------

def _cross_entropy(xp, input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                   use_softmax=True, label_smoothing=0.0):
    nd = input.ndim
    ctype = _ctype(input) if weight is None else _ctype(input, weight)
    lead = tuple(input.shape[:-1])
    fused = (ctype is not None and nd >= 1 and input.size > 0 and -nd <= axis < nd and axis % nd == nd - 1
             and not soft_label and use_softmax and not label_smoothing and reduction in ("none", "mean", "sum")
             and label.dtype.name in LABEL_CTYPES and tuple(label.shape) in (lead, lead + (1,))
             and (weight is None or tuple(weight.shape) == (input.shape[-1],)))
    if not fused:
        return GENERIC("cross_entropy")(xp, input, label, weight, ignore_index, reduction, soft_label, axis,
                                        use_softmax, label_smoothing)
    classes = input.shape[-1]
    rows = input.size // classes
    x = xp.ascontiguousarray(input)
    labels = _flat(xp, label)
    loss = xp.empty((rows,), dtype=xp.float32)
    scale = xp.empty((rows,), dtype=xp.float32)
    bad = xp.full((1,), _NO_ROW, dtype=xp.uint64)
    w = x if weight is None else xp.ascontiguousarray(weight)
    name = f"cross_entropy_fwd<{ctype}, {LABEL_CTYPES[label.dtype.name]}>"
    device = RUNTIME.device_of(x)
    RUNTIME.launch(RUNTIME.function("softmax", name, device), device, (rows,), (_row_threads(classes),),
                   (x, labels, w, np.int32(weight is not None), _i64(classes), _i64(ignore_index), loss, scale, bad))
    first = int(bad[0])  # the generic kernel's range check, one read
    if first != _NO_ROW:
        value = int(labels[first])
        raise IndexError(f"label value {value} is out of range for {classes} classes (valid: 0 to {classes - 1}, "
                         f"or ignore_index={ignore_index})")
    if reduction == "none":
        shape = lead if label.ndim < nd else lead + (1,)
        return loss.reshape(shape).astype(input.dtype)
    total = xp.sum(loss)
    if reduction == "mean":
        if weight is not None or ignore_index >= 0:  # Paddle: divide by the summed weights of the kept rows
            denominator = xp.sum(scale)
            total = total / (denominator + (denominator == 0))
        else:
            total = total / rows
    return xp.asarray(total).astype(input.dtype)


# -- layer_norm, rms_norm and their backward ---------------------------------------------------------------------

def _affine_ok(a, n, normalized_shape, dtype):
    return a is None or (list(a.shape) in ([n], list(normalized_shape)) and a.dtype == dtype)


def _norm_plan(x, normalized_shape, *affine):
    """(ctype, rows, n) when the fused forward applies, else None."""
    k = len(normalized_shape)
    ctype = _ctype(x)
    if ctype is None or k == 0 or x.ndim < k or tuple(x.shape[x.ndim - k:]) != tuple(normalized_shape) or x.size == 0:
        return None
    n = math.prod(normalized_shape)
    if not all(_affine_ok(a, n, normalized_shape, x.dtype) for a in affine):
        return None
    return ctype, x.size // n, n


def _layer_norm(xp, x, weight=None, bias=None, normalized_shape=(), epsilon=1e-05):
    plan = _norm_plan(x, normalized_shape, weight, bias)
    if plan is None:
        return GENERIC("layer_norm")(xp, x, weight, bias, normalized_shape, epsilon)
    ctype, rows, n = plan
    src = xp.ascontiguousarray(x)
    out = xp.empty(x.shape, dtype=x.dtype)
    mean = xp.empty((rows, 1), dtype=xp.float32)
    rstd = xp.empty((rows, 1), dtype=xp.float32)
    w = src if weight is None else _flat(xp, weight)
    b = src if bias is None else _flat(xp, bias)
    _run("norm", "layer_norm_fwd", ctype, src, (rows,), (_row_threads(n),),
         (src, w, b, np.int32(weight is not None), np.int32(bias is not None), _i64(n), _f32(epsilon), out, mean,
          rstd))
    return out, mean, rstd


def _rms_norm(xp, input, weight=None, normalized_shape=(), eps=None):
    plan = _norm_plan(input, normalized_shape, weight)
    if plan is None:
        return GENERIC("rms_norm")(xp, input, weight, normalized_shape, eps)
    ctype, rows, n = plan
    epsilon = 2.0 ** -23 if eps is None else eps  # the generic default for inputs narrower than float64
    src = xp.ascontiguousarray(input)
    out = xp.empty(input.shape, dtype=input.dtype)
    rstd = xp.empty((rows, 1), dtype=xp.float32)
    w = src if weight is None else _flat(xp, weight)
    _run("norm", "rms_norm_fwd", ctype, src, (rows,), (_row_threads(n),),
         (src, w, np.int32(weight is not None), _i64(n), _f32(epsilon), out, rstd))
    return out, rstd


def _normalize_grad(xp, x, weight, g, mean, rstd, view=(), stats=(), affine=(), fixed=False, bias=True):
    fused = (not fixed and len(view) == 2 and tuple(stats) == (1,) and tuple(affine) == (1, view[1])
             and x.size > 0 and x.size == view[0] * view[1] and g.size == x.size)
    ctype = _ctype(x, g) if weight is None else _ctype(x, g, weight)
    if fused:
        rows, n = view
        fused = (ctype is not None and (weight is None or weight.size == n) and rstd.size == rows
                 and (mean is None or mean.size == rows))
    if not fused:
        return GENERIC("_normalize_grad")(xp, x, weight, g, mean, rstd, view, stats, affine, fixed, bias)
    src, gs = xp.ascontiguousarray(x), xp.ascontiguousarray(g)
    center = mean is not None
    r = _flat(xp, rstd.astype(xp.float32, copy=False))
    mu = _flat(xp, mean.astype(xp.float32, copy=False)) if center else r  # (r: an unread float* placeholder)
    w = src if weight is None else _flat(xp, weight)
    dx = xp.empty(x.shape, dtype=x.dtype)
    _run("norm", "norm_bwd_rows", ctype, src, (rows,), (_row_threads(n),),
         (src, w, gs, mu, r, np.int32(weight is not None), np.int32(center), _i64(n), dx))
    chunks = max(1, min(NORM_CHUNKS, rows // 32))
    per_chunk = -(-rows // chunks)
    chunks = -(-rows // per_chunk)
    dw_part = xp.empty((chunks, n), dtype=xp.float32)
    db_part = xp.empty((chunks, n), dtype=xp.float32)
    _run("norm", "norm_bwd_cols", ctype, src, (-(-n // 32), chunks), (32, 8),
         (src, gs, mu, r, np.int32(center), _i64(rows), _i64(n), _i64(per_chunk), dw_part, db_part))
    dweight = xp.sum(dw_part, axis=0).astype(x.dtype)
    dbias = xp.sum(db_part, axis=0).astype(x.dtype) if bias else xp.zeros((0,), dtype=x.dtype)
    return dx, dweight, dbias


# -- gelu ----------------------------------------------------------------------------------------------------

def _gelu(xp, x, approximate=False):
    ctype = _ctype(x)
    if approximate in (True, "tanh"):
        use_tanh = 1
    elif approximate in (False, "none"):
        use_tanh = 0
    else:
        ctype = None  # the generic kernel raises, naming what it accepts
    if ctype is None or x.size == 0:
        return GENERIC("gelu")(xp, x, approximate=approximate)
    src = xp.ascontiguousarray(x)
    out = xp.empty(x.shape, dtype=x.dtype)
    _run("activation", "gelu_fwd", ctype, src, _grid(x.size), (BLOCK,), (src, out, _i64(x.size), np.int32(use_tanh)))
    return out


# -- fused_rotary_embedding -------------------------------------------------------------------------------------

def _broadcast_strides(shape, a):
    """Element strides of `a` broadcast (numpy-style) to `shape`: 0 along broadcast axes; None if it does not
    broadcast to exactly `shape`."""
    if a.ndim > len(shape):
        return None
    lead = len(shape) - a.ndim
    out = [0] * lead
    for n, m, s in zip(shape[lead:], a.shape, a.strides):
        if m == n:
            out.append(s // a.itemsize if n > 1 else 0)
        elif m == 1:
            out.append(0)
        else:
            return None
    return out


def _rotary_layout(x, cos, sin):
    """(n0, n1, n2, cos strides, sin strides) over x's leading axes collapsed to three, or None."""
    shape = tuple(x.shape)
    cs, ss = _broadcast_strides(shape, cos), _broadcast_strides(shape, sin)
    if cs is None or ss is None:
        return None
    dims = []  # [size, cos stride, sin stride] of the leading axes, size-1 axes dropped, mergeable ones merged
    for n, c, s in zip(shape[:-1], cs[:-1], ss[:-1]):
        if n == 1:
            continue
        if dims and dims[-1][1] == c * n and dims[-1][2] == s * n:
            dims[-1] = [dims[-1][0] * n, c, s]
        else:
            dims.append([n, c, s])
    if len(dims) > 3:
        return None
    dims = [[1, 0, 0]] * (3 - len(dims)) + dims
    return dims, cs[-1], ss[-1]


def _rotary(xp, x, cos, sin, *, transpose=False):
    ctype = _ctype(x, cos, sin)
    layout = None
    if ctype is not None and x.ndim >= 1 and x.size > 0 and x.shape[-1] % 2 == 0:
        layout = _rotary_layout(x, cos, sin)
    if layout is None:
        return GENERIC("fused_rotary_embedding")(xp, x, cos, sin, transpose=transpose)
    dims, cd, sd = layout
    src = xp.ascontiguousarray(x)
    out = xp.empty(x.shape, dtype=x.dtype)
    (_, c0, s0), (n1, c1, s1), (n2, c2, s2) = dims
    _run("rotary", "rotary_fwd", ctype, src, _grid(x.size), (BLOCK,),
         (src, cos, sin, out, _i64(x.size), _i64(n1), _i64(n2), _i64(x.shape[-1]), _i64(c0), _i64(c1), _i64(c2),
          _i64(cd), _i64(s0), _i64(s1), _i64(s2), _i64(sd), np.int32(bool(transpose))))
    return out


# -- dropout ------------------------------------------------------------------------------------------------------

def _splitmix64(z):
    mask = (1 << 64) - 1
    z &= mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def _dropout(xp, x, p=0.5, axis=None, training=True, mode="upscale_in_train", *, generator):
    ctype = _ctype(x)
    if (ctype is None or axis is not None or not training or not 0.0 < p < 1.0 or x.size == 0
            or mode not in ("upscale_in_train", "downscale_in_infer")):
        return GENERIC("dropout")(xp, x, p, axis, training, mode, generator=generator)
    # one host-side draw (no device round trip with the gpu generator) seeds the counter-based hash
    key = _splitmix64(int(generator.integers(0, 2 ** 62)))
    scale = float(np.asarray(1.0 / (1.0 - p)).astype(x.dtype)) if mode == "upscale_in_train" else 1.0
    src = xp.ascontiguousarray(x)
    out = xp.empty(x.shape, dtype=x.dtype)
    mask = xp.empty(x.shape, dtype=x.dtype)
    _run("dropout", "dropout_fwd", ctype, src, _grid(x.size), (BLOCK,),
         (src, out, mask, _i64(x.size), np.uint64(key), _f32(p), _f32(scale)))
    return out, mask


# -- adam_step_ -----------------------------------------------------------------------------------------------------

_WEAK: dict = {}


def _weak_scalars(dtype) -> bool:
    """Whether numpy computes array * Python float in the array's dtype (NEP 50: the float is rounded to it,
    as for float16) rather than promoting to float32 (ml_dtypes' bfloat16): the generic kernel's rounding."""
    weak = _WEAK.get(dtype)
    if weak is None:
        weak = _WEAK[dtype] = (np.ones(1, dtype=dtype) * 0.5).dtype == dtype
    return weak


def _contiguous_like(a, first):
    return a is not None and a.dtype == first.dtype and a.size == first.size and a.flags.c_contiguous


def _adam(xp, param, grad, moment1, moment2, moment2_max, *, lr, beta1, beta2, epsilon, step, weight_decay=0.0,
          decoupled=False):
    ctype = _ctype(param)
    arrays = (param, grad, moment1, moment2) + (() if moment2_max is None else (moment2_max,))
    if ctype is None or step < 1 or param.size == 0 or not all(_contiguous_like(a, param) for a in arrays):
        return GENERIC("adam_step_")(xp, param, grad, moment1, moment2, moment2_max, lr=lr, beta1=beta1, beta2=beta2,
                                     epsilon=epsilon, step=step, weight_decay=weight_decay, decoupled=decoupled)

    weak = _weak_scalars(param.dtype)

    def const(v):  # a Python float as the generic kernel's arithmetic sees it
        return np.float32(np.asarray(v, dtype=np.float64).astype(param.dtype if weak else np.float32))

    root_bc2 = math.sqrt(1.0 - beta2 ** step)
    _run("optim", "adam_step", ctype, param, _grid(param.size), (BLOCK,),
         (param, grad, moment1, moment2, param if moment2_max is None else moment2_max,
          np.int32(moment2_max is not None), _i64(param.size), np.int32(bool(decoupled)),
          np.int32(bool(weight_decay)), np.int32(weak), const(1.0 - lr * weight_decay), const(weight_decay),
          const(1.0 - beta1), const(beta2), const(1.0 - beta2), const(epsilon * root_bc2),
          const(lr * root_bc2 / (1.0 - beta1 ** step))))


# -- moe_gate_dispatch_op, moe_combine_op (ops of oarlock-incubate; no import of it: kernels register by name) --

def _moe_dispatch(xp, x, gate_logits, corr_bias=None, k=1, capacity=1, use_pad=True):
    ctype = _ctype(x)
    f32 = np.dtype(np.float32)
    if (ctype is None or x.ndim != 2 or x.size == 0 or gate_logits.dtype != f32
            or (corr_bias is not None and corr_bias.dtype != f32)):
        return GENERIC("moe_gate_dispatch_op")(xp, x, gate_logits, corr_bias, k=k, capacity=capacity,
                                               use_pad=use_pad)
    rows, hidden = x.shape
    experts = gate_logits.shape[1]
    src, gate = xp.ascontiguousarray(x), xp.ascontiguousarray(gate_logits)
    bias = gate[0] if corr_bias is None else xp.ascontiguousarray(corr_bias)   # any float32 pointer when unused
    expert_id = xp.empty((rows, k), dtype=np.int32)
    combine = xp.empty((rows, k), dtype=np.float32)
    _run("moe", "moe_topk", None, src, _grid(rows), (BLOCK,),
         (gate, bias, np.int32(corr_bias is not None), expert_id, combine, _i64(rows), np.int32(experts),
          np.int32(k)))
    rank = xp.empty(rows * k, dtype=np.int64)
    counts = xp.empty(experts, dtype=np.int64)
    offset = xp.empty(experts, dtype=np.int64)
    _run("moe", "moe_rank", None, src, (1,), (_row_threads(min(experts, 256)),),
         (expert_id, rank, counts, offset, _i64(rows), np.int32(experts), np.int32(k), np.int32(bool(use_pad))))
    y = xp.zeros((experts * capacity if use_pad else rows * k, hidden), dtype=x.dtype)
    scatter_index = xp.empty((k, rows), dtype=np.int32)
    _run("moe", "moe_scatter", ctype, src, (max(1, min(rows * k, MAX_GRID)),), (_row_threads(min(hidden, 256)),),
         (src, expert_id, rank, counts, offset, y, scatter_index, combine, _i64(rows), _i64(hidden), np.int32(k),
          _i64(capacity), np.int32(bool(use_pad))))
    return y, combine, scatter_index, offset, expert_id


def _moe_combine(xp, x, combine_weights, scatter_index):
    ctype = _ctype(x, combine_weights)
    if ctype is None or x.ndim != 2 or scatter_index.dtype != np.dtype(np.int32) or scatter_index.size == 0:
        return GENERIC("moe_combine_op")(xp, x, combine_weights, scatter_index)
    rows, k = scatter_index.shape
    hidden = x.shape[1]
    src = xp.ascontiguousarray(x)
    out = xp.empty((rows, hidden), dtype=x.dtype)
    _run("moe", "moe_combine_fwd", ctype, src, _grid(rows * hidden), (BLOCK,),
         (src, xp.ascontiguousarray(combine_weights), xp.ascontiguousarray(scatter_index), out, _i64(rows),
          _i64(hidden), np.int32(k)))
    return out


def _moe_combine_grad(xp, x, combine_weights, scatter_index, grad_y):
    ctype = _ctype(x, combine_weights, grad_y)
    if ctype is None or x.ndim != 2 or scatter_index.dtype != np.dtype(np.int32) or scatter_index.size == 0:
        return GENERIC("moe_combine_grad_op")(xp, x, combine_weights, scatter_index, grad_y)
    live = scatter_index.reshape(-1)[combine_weights.reshape(-1) != 0]
    if live.size and int(xp.bincount(live).max()) > 1:      # a row summed from two slots: the generic kernel
        return GENERIC("moe_combine_grad_op")(xp, x, combine_weights, scatter_index, grad_y)
    rows, k = scatter_index.shape
    hidden = x.shape[1]
    src = xp.ascontiguousarray(x)
    dx = xp.zeros(x.shape, dtype=x.dtype)
    dw = xp.empty((rows, k), dtype=combine_weights.dtype)
    _run("moe", "moe_combine_bwd", ctype, src, (max(1, min(rows * k, MAX_GRID)),), (_row_threads(min(hidden, 256)),),
         (src, xp.ascontiguousarray(combine_weights), xp.ascontiguousarray(scatter_index),
          xp.ascontiguousarray(grad_y), dx, dw, _i64(rows * k), _i64(hidden), np.int32(k)))
    return dx, dw


_ACT_CODES = {"gelu": 0, "relu": 1, "swiglu": 2, "geglu": 3}


def _bias_act(xp, x, bias=None, act_method="gelu"):
    ctype = _ctype(x) if bias is None else _ctype(x, bias)
    act = _ACT_CODES.get(act_method)
    if ctype is None or act is None or x.ndim < 1 or x.size == 0 or (act >= 2 and x.shape[-1] % 2):
        return GENERIC("fused_bias_act_op")(xp, x, bias, act_method)
    out_cols = x.shape[-1] // 2 if act >= 2 else x.shape[-1]
    src = xp.ascontiguousarray(x)
    out = xp.empty(x.shape[:-1] + (out_cols,), dtype=x.dtype)
    _run("bias_act", "bias_act_fwd", ctype, src, _grid(out.size), (BLOCK,),
         (src, src if bias is None else xp.ascontiguousarray(bias), np.int32(bias is not None), out,
          _i64(out.size), _i64(out_cols), np.int32(act)))
    return out


def _partial_rope(xp, x, cos, sin, *, transpose=False):
    ctype = _ctype(x, cos, sin)
    if ctype is None or x.ndim != 4 or x.size == 0:
        return GENERIC("fused_partial_rope_op")(xp, x, cos, sin, transpose=transpose)
    _, seq, heads, head_dim = x.shape
    src = xp.ascontiguousarray(x)
    out = xp.empty(x.shape, dtype=x.dtype)
    _run("partial_rope", "partial_rope_fwd", ctype, src, _grid(x.size), (BLOCK,),
         (src, xp.ascontiguousarray(cos), xp.ascontiguousarray(sin), out, _i64(x.size), _i64(seq), _i64(heads),
          np.int32(head_dim), np.int32(cos.shape[-1]), np.int32(bool(transpose))))
    return out


# -- registration ---------------------------------------------------------------------------------------------------

KERNELS = {
    "softmax": _softmax_kernel("softmax", "softmax_fwd"),
    "softmax_compat": _softmax_kernel("softmax_compat", "softmax_fwd"),
    "log_softmax": _softmax_kernel("log_softmax", "log_softmax_fwd"),
    "cross_entropy": _cross_entropy,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "_normalize_grad": _normalize_grad,
    "gelu": _gelu,
    "fused_rotary_embedding": _rotary,
    "dropout": _dropout,
    "adam_step_": _adam,
    "moe_gate_dispatch_op": _moe_dispatch,
    "moe_combine_op": _moe_combine,
    "moe_combine_grad_op": _moe_combine_grad,
    "fused_partial_rope_op": _partial_rope,
    "fused_bias_act_op": _bias_act,
}


def register(ops):
    """Register the fused kernels for device "gpu" (and the float32, float16 and bfloat16 dtypes)."""
    registry = getattr(ops, "_registry", None)
    if registry is not None:
        GENERIC.registries.add(registry)
    for op, fn in KERNELS.items():
        ops.kernel(op, device=DEVICE, dtypes=DTYPES)(fn)
