"""Specs for the complex family: complex, polar, view_as_complex, real, imag, view_as_real.

The table draws real inputs and checks real outputs' gradients, so the ops that make complex
tensors are called through `_and_parts`, which also returns view_as_real of the result: the
complex values are compared with numpy, the (real, imaginary) pairs carry the finite-difference
check. real, imag and view_as_real take complex inputs, which the table cannot draw: their spec is
a custom check (values for complex64 and complex128, refused dtypes, and gradients by finite
differences through the real and imaginary parts, in torch's convention d/da + i d/db).
"""

import numpy as np

import oarlock
from finite_differences import numeric_grad
from op_specs.base import Case, In, OpSpec

PARTS = ("float32", "float64")
RNG = np.random.default_rng(7)


def _and_parts(name):
    """Call oarlock.<name> and return (result, view_as_real(result))."""
    def call(*args, **kwargs):
        out = getattr(oarlock, name)(*args, **kwargs)
        return out, oarlock.view_as_real(out)
    return call


def _with_parts(fn):
    """A reference returning (z, [real, imag] stacked last), matching _and_parts."""
    def ref(*args, **kwargs):
        z = fn(*args, **kwargs)
        return z, np.stack([z.real, z.imag], axis=-1)
    return ref


def _complex_input(shape, dtype):
    values = RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)
    return values.astype(dtype)


def _check_complex_inputs(name, ref, accepted=("complex64", "complex128")):
    """real, imag, view_as_real: values, refused dtypes and finite-difference gradients."""
    def check(ol):
        fn = getattr(ol, name)
        for dtype in ("complex64", "complex128"):
            for shape in ((3, 4), (), (0, 2)):
                host = _complex_input(shape, dtype)
                out = fn(ol.to_tensor(host))
                want = ref(host.astype(np.complex128))
                assert out.dtype == ("float32" if dtype == "complex64" else "float64"), (name, out.dtype)
                np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, err_msg=f"{name} {dtype} {shape}")
                assert getattr(ol.to_tensor(host), name)().shape == list(want.shape)  # the Tensor method
        for dtype in ("int32", "int64", "bool", "float32", "float64"):
            if dtype in accepted:
                continue
            try:
                fn(ol.ones([2], dtype=dtype))
            except (TypeError, ValueError) as exc:
                assert name in str(exc) and dtype in str(exc), str(exc)
            else:
                raise AssertionError(f"{name} accepted dtype {dtype}")
        # gradient: the loss is real, the input z = a + ib is built from real a, b
        a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
        weights = RNG.standard_normal(ref(a + 1j * b).shape)
        ta, tb = ol.to_tensor(a, stop_gradient=False), ol.to_tensor(b, stop_gradient=False)
        z = ol.complex(ta, tb)
        (fn(z) * ol.to_tensor(weights)).sum().backward()
        numeric = numeric_grad(lambda x, y: ref(x + 1j * y), [a.copy(), b.copy()], weights)
        np.testing.assert_allclose(ta.grad.numpy(), numeric[0], rtol=1e-6, atol=1e-8, err_msg=f"{name} d/da")
        np.testing.assert_allclose(tb.grad.numpy(), numeric[1], rtol=1e-6, atol=1e-8, err_msg=f"{name} d/db")
        # the complex gradient itself: d/da + i d/db
        z = ol.to_tensor(a + 1j * b, stop_gradient=False)
        (fn(z) * ol.to_tensor(weights)).sum().backward()
        np.testing.assert_allclose(z.grad.numpy(), numeric[0] + 1j * numeric[1], rtol=1e-6, atol=1e-8)
    return check


def _real_also_takes_floats(ol):
    x = ol.to_tensor([1.0, -2.0])
    np.testing.assert_array_equal(ol.real(x).numpy(), [1.0, -2.0])


def _real_check(ol):
    _check_complex_inputs("real", np.real, accepted=("complex64", "complex128", "float32", "float64"))(ol)
    _real_also_takes_floats(ol)


SPECS = [
    OpSpec("complex", [
        Case([In((3, 4)), In((3, 4))], name="same_shape"),
        Case([In((2, 1)), In((3,))], name="broadcast"),
        Case([In(()), In(())], name="0d"),
    ], ref=_with_parts(lambda re, im: re + 1j * im), dtypes=PARTS, call=_and_parts("complex")),
    OpSpec("polar", [
        Case([In((3, 4), domain=(0.1, 2.0)), In((3, 4), domain=(-3.0, 3.0))], name="same_shape"),
        Case([In((3,), domain=(0.1, 2.0)), In((2, 1), domain=(-3.0, 3.0))], name="broadcast"),
    ], ref=_with_parts(lambda r, t: r * np.cos(t) + 1j * r * np.sin(t)), dtypes=PARTS, call=_and_parts("polar")),
    OpSpec("view_as_complex", [
        Case([In((3, 2))], name="2d"),
        Case([In((2, 3, 2))], name="3d"),
        Case([In((2,))], name="0d_result"),
    ], ref=_with_parts(lambda x: x[..., 0] + 1j * x[..., 1]), dtypes=PARTS, call=_and_parts("view_as_complex")),
    OpSpec("real", [], check=_real_check),
    OpSpec("imag", [], check=_check_complex_inputs("imag", np.imag)),
    OpSpec("view_as_real", [], check=_check_complex_inputs("view_as_real", lambda z: np.stack([z.real, z.imag], -1))),
]
