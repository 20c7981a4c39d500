"""Specs for the in-place variants made by `ops.define_inplace` (exp_, relu_, clip_, tril_, ...), derived
from their base ops' specs, plus scale (and its variant), fill_ and zero_.

A variant runs on a clone of the base case's first input (so the finite-difference check sees a
non-leaf written in place, as model code does), must equal the base op's float64 reference cast to
the input's dtype, keep that dtype, and have the base op's gradient through the in-place write.
Integer inputs of ops whose result is float (exp on int) are refused: the result cannot be stored.
"""

from __future__ import annotations

import numpy as np

from op_specs import activations_more, elementwise, indexing, matrix, nn, paddle_math, reduction, shape
from oarlock.registry import default_registry
from op_specs.base import ALL_REAL, FLOATS, INTS, Case, In, OpSpec, library_op

# every variant define_inplace made (index_put_ has its own spec below, its call differs), by base op
VARIANT_OPS = {name: op for name, op in default_registry().ops.items() if op.inplace_of and name != "index_put_"}
VARIANTS = sorted(op.inplace_of for op in VARIANT_OPS.values())
# bases whose result is float whatever the input (exp of an int): an integer x cannot hold it
FLOAT_RESULT = {op.inplace_of for op in VARIANT_OPS.values() if op.to_float}


def _on_a_clone(name):
    """Call variant `name` on a clone of x: x itself stays as made, the clone is written and returned."""
    variant = library_op(name)

    def call(x, *args, **kwargs):
        target = x.clone()
        out = variant(target, *args, **kwargs)
        assert out is target, f"{name} must return the tensor it wrote"
        return out
    return call


def _index_put_call(x, value, index, *tensors, **kwargs):
    target = x.clone()
    out = library_op("index_put_")(target, indexing._fill(index, tensors), value, **kwargs)
    assert out is target, "index_put_ must return the tensor it wrote"
    return out


def _cast_to_input(ref):
    """The base reference, stored in x's dtype (a bool comparison written into a float x is 0.0/1.0)."""
    def cast(x, *args, **kwargs):
        return np.asarray(ref(x, *args, **kwargs)).astype(np.asarray(x).dtype)
    return cast


# cases of a base op whose result does not have x's shape (cumsum without an axis flattens) or dtype
NOT_IN_PLACE = {"cumsum": ("flat", "0d", "dtype")}
# cases whose result has a higher kind than some input dtypes (a float bound clipping an int x, an int
# scalar and-ed with a bool x): the variant refuses those dtypes, as torch does, so they are left out
KIND_RAISING = {("clip", "min_only"): FLOATS, ("clip", "max_only"): FLOATS, ("bitwise_and", "scalar"): INTS,
                ("bitwise_or", "scalar"): INTS, ("bitwise_xor", "scalar"): INTS}


def _keeps_x_shape(base: OpSpec, case: Case) -> bool:
    """Whether an in-place variant can run this case: x is a tensor input and the tensor inputs broadcast
    to x's shape (a Python scalar or a larger operand in front cannot be written into)."""
    if not case.args or not isinstance(case.args[0], In) or case.name in NOT_IN_PLACE.get(base.op, ()):
        return False
    shapes = [tuple(a.shape) for a in case.args if isinstance(a, In)]
    return np.broadcast_shapes(*shapes) == shapes[0]


def _variant_spec(base: OpSpec) -> OpSpec:
    name = base.op + "_"
    dtypes = tuple(d for d in base.dtypes if d in FLOATS) if base.op in FLOAT_RESULT else base.dtypes
    call = _index_put_call if base.op == "index_put" else _on_a_clone(name)
    cases = [c if (base.op, c.name) not in KIND_RAISING else
             Case(c.args, c.kwargs, c.ref, c.name, c.grad, KIND_RAISING[base.op, c.name])
             for c in base.cases if _keeps_x_shape(base, c)]
    if base.op == "cumsum":       # a running sum of bools counts in int64
        dtypes = tuple(d for d in dtypes if d != "bool")
    return OpSpec(name, cases, ref=_cast_to_input(base.ref), dtypes=dtypes, grad=base.grad, call=call,
                  rtol=base.rtol, out_dtype=lambda dt, *args, **kwargs: dt)


def _check_fill_and_zero(paddle):
    x = paddle.to_tensor([[1.0, 2.0], [3.0, 4.0]], stop_gradient=False)
    h = x * 2.0
    assert h.fill_(7.5) is h and h.inplace_version == 1
    np.testing.assert_array_equal(h.numpy(), np.full((2, 2), 7.5, np.float32))
    (h * x).sum().backward()          # h no longer depends on x: d/dx (7.5 x) = 7.5
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 7.5))
    i = paddle.to_tensor([1, 2, 3])
    assert i.zero_() is i and i.numpy().tolist() == [0, 0, 0] and i.dtype == paddle.int64
    i.fill_(4)
    assert i.numpy().tolist() == [4, 4, 4]


def _scale_ref(x, scale=1.0, bias=0.0, bias_after_scale=True):
    out = x * scale + bias if bias_after_scale else (x + bias) * scale
    return out.astype(x.dtype)    # Paddle's scale keeps x's dtype (integers truncate)


SCALE = OpSpec("scale", [
    Case([In((3, 4))], name="default"),
    Case([In((3, 4))], {"scale": 2.5, "bias": -1.0}, name="bias_after"),
    Case([In((2, 3))], {"scale": -0.5, "bias": 3.0, "bias_after_scale": False}, name="bias_before"),
    Case([In(())], {"scale": 3.0}, name="0d"),
    Case([In((0, 3))], {"scale": 3.0}, name="empty"),
], ref=_scale_ref, dtypes=ALL_REAL, out_dtype=lambda dt, *args, **kwargs: dt)

_BASES = {spec.op: spec for module in (activations_more, elementwise, indexing, matrix, nn, paddle_math, reduction,
                                       shape)
          for spec in module.SPECS}
_BASES["scale"] = SCALE

SPECS = [
    SCALE,
    *(_variant_spec(_BASES[base]) for base in VARIANTS),
    OpSpec("index_put_", indexing.INDEX_PUT_CASES, ref=_cast_to_input(indexing._put_ref), dtypes=indexing.ALL,
           call=_index_put_call, out_dtype=lambda dt, *args, **kwargs: dt),
    OpSpec("fill_", [], check=_check_fill_and_zero, grad=False),
    OpSpec("zero_", [], check=lambda paddle: None, grad=False),   # checked with fill_
]
