"""The "cpu" device's own kernels for float32 and float64: one-pass C ufuncs from `oarlock_cpu._kernels`,
large calls split over the free cores by the extension (oarlock_cpu.parallel).

They override the generic array-API kernels of erf, gelu (exact form), sigmoid, silu and silu_grad,
which numpy computes in many passes (erf in about forty), and add one for gelu_grad, the fused exact
GELU backward g * (Phi(x) + x phi(x)), for when an ops plugin defines that op:

    gelu_grad(x: Tensor, g: Tensor, approximate: Any = False) -> Tensor

Other dtypes, and gelu's tanh form, go to the generic kernel. Without the compiled extension (a
source tree that was never built) nothing is registered and the generic kernels serve every call.
"""

from __future__ import annotations

import weakref


from oarlock.registry import ANY_DTYPE, GENERIC, default_registry
from oarlock_cpu.parallel import run_ufunc

try:
    from oarlock_cpu import _kernels
except ImportError:  # never built: the generic kernels stay in charge
    _kernels = None

DEVICE = "cpu"
DTYPES = ("float32", "float64")


class GenericKernels:
    """The generic kernel of an op, for the inputs these kernels hand back: looked up on first use in the
    default registry, then in the registries these kernels were registered in (tests build isolated
    ones); an op's generic kernel is the same function in every registry."""

    def __init__(self):
        self.registries = weakref.WeakSet()
        self.found: dict = {}

    def track(self, ops):
        """Remember the registry an `oarlock_register_ops` registrar fills (not exposed publicly)."""
        registry = getattr(ops, "_registry", None)
        if registry is not None:
            self.registries.add(registry)

    def __call__(self, op):
        fn = self.found.get(op)
        if fn is None:
            for registry in [default_registry(), *list(self.registries)]:
                entry = registry.kernels.get((op, GENERIC, ANY_DTYPE))
                if entry is not None:
                    fn = self.found[op] = entry[0]
                    break
            else:
                raise NotImplementedError(f"oarlock_cpu: op {op!r} needs its generic kernel for this input, and "
                                          f"no installed plugin registers one (is oarlock-ops installed?)")
        return fn


generic = GenericKernels()


def _is_exact(approximate):
    """gelu's `approximate`: Paddle's bool or torch's 'none' / 'tanh'; anything else goes to the generic
    kernel, which raises the op's own error."""
    return approximate is False or approximate == "none"


def erf(xp, x):
    return run_ufunc(_kernels.erf, x)


def gelu(xp, x, approximate=False):
    if not _is_exact(approximate):
        return generic("gelu")(xp, x, approximate=approximate)
    return run_ufunc(_kernels.gelu, x)


def gelu_grad(xp, x, g, approximate=False):
    if not _is_exact(approximate) or x.dtype != g.dtype:
        return generic("gelu_grad")(xp, x, g, approximate=approximate)
    return run_ufunc(_kernels.gelu_grad, x, g)


def sigmoid(xp, x):
    return run_ufunc(_kernels.sigmoid, x)


def silu(xp, x, inplace=False):
    # `inplace` is accepted and ignored, as by the generic kernel (the result is always a new array)
    return run_ufunc(_kernels.silu, x)


def silu_grad(xp, x, g):
    if x.dtype != g.dtype:
        return generic("silu_grad")(xp, x, g)
    return run_ufunc(_kernels.silu_grad, x, g)


KERNELS = {"erf": erf, "gelu": gelu, "gelu_grad": gelu_grad, "sigmoid": sigmoid, "silu": silu,
           "silu_grad": silu_grad}


def register_all(ops, kernels: dict, dtypes=DTYPES) -> None:
    """Register {op name: kernel} as the "cpu" device's kernels for `dtypes`, and remember the registrar's
    registry so that `generic` finds the ops' generic kernels in it (what every module here registers with)."""
    generic.track(ops)
    for op, fn in kernels.items():
        ops.kernel(op, device=DEVICE, dtypes=dtypes)(fn)


def register(ops):
    """Register the C kernels for device "cpu" (float32, float64); nothing when the extension is missing."""
    if _kernels is not None:
        register_all(ops, KERNELS)
