"""torch.testing.assert_close: torch's closeness rule |actual - expected| <= atol + rtol * |expected|, with its
default tolerances per dtype, checked in float64 numpy."""

from __future__ import annotations

import numpy as np
import oarlock

from oarlock_torch_proxy.missing import missing_getattr

_DEFAULT_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
                       "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}


def _array(x):
    if isinstance(x, oarlock.Tensor):
        return x.detach().astype("float64").numpy() if x.dtype.is_floating_point else x.numpy()
    return np.asarray(x)


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, check_device=True,
                 check_dtype=True, check_layout=True, check_stride=False, msg=None):
    if isinstance(actual, (list, tuple)):
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype, msg=msg)
        return
    if isinstance(actual, oarlock.Tensor) and isinstance(expected, oarlock.Tensor) and check_dtype \
            and actual.dtype != expected.dtype:
        raise AssertionError(msg or f"The values for attribute 'dtype' do not match: {actual.dtype} != "
                                    f"{expected.dtype}.")
    default = _DEFAULT_TOLERANCES.get(getattr(getattr(actual, "dtype", None), "name", ""), (0.0, 0.0))
    rtol = default[0] if rtol is None else rtol
    atol = default[1] if atol is None else atol
    a, e = _array(actual), _array(expected)
    if a.shape != e.shape:
        raise AssertionError(msg or f"The values for attribute 'shape' do not match: {list(a.shape)} != "
                                    f"{list(e.shape)}.")
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan):
        worst = float(np.nanmax(np.abs(a.astype(np.float64) - e.astype(np.float64)))) if a.size else 0.0
        raise AssertionError(msg or f"Tensor-likes are not close! Greatest absolute difference: {worst} "
                                    f"(up to {atol} allowed, rtol {rtol})")


__getattr__ = missing_getattr("torch.testing")
