"""Spec types for the table-driven op tests.

An OpSpec names an op (the registry name) and gives Cases. A Case lists the
arguments: `In(shape)` makes a random input (its values drawn from
`domain`), anything else is passed as is. `ref` is the float64 numpy
reference: it gets the inputs as float64 numpy arrays (ints for integer
inputs) in the same positions, plus the case's kwargs, and returns an array
(or a tuple/list of arrays for multi-output ops).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

FLOATS = ("float32", "float64", "bfloat16")
INTS = ("int32", "int64")
ALL_REAL = FLOATS + INTS
ALL = ALL_REAL + ("bool",)


def library_op(name: str):
    """The op `name` as the op library holds it, oarlock.ops.<registering plugin>.<name>: how tests call
    internal ops (gradient kernels, helpers), which have no public name. Resolved at call time."""

    def call(*args, **kwargs):
        import oarlock
        from oarlock.registry import default_registry, library_name
        library = getattr(oarlock.ops, library_name(default_registry().ops[name].plugin))
        return getattr(library, name)(*args, **kwargs)

    call.__name__ = name
    return call


@dataclass
class In:
    """A random tensor input of this shape. dtype=None means: the dtype under test.
    `domain` bounds the values; `int_range` bounds integer inputs (indices: set dtype='int64')."""

    shape: tuple
    dtype: str | None = None
    domain: tuple = (-2.0, 2.0)
    int_range: tuple = (-5, 6)
    grad: bool = True          # take a gradient with respect to this input
    requires_nonzero: bool = False
    values: Any = None         # fixed values instead of random ones (e.g. index lists)


@dataclass
class Case:
    args: list
    kwargs: dict = field(default_factory=dict)
    ref: Callable | None = None     # falls back to the spec's ref
    name: str = ""
    grad: bool = True               # include this case in the gradient check
    dtypes: tuple | None = None     # override the spec's dtypes for this case


@dataclass
class OpSpec:
    op: str
    cases: list
    ref: Callable | None = None
    dtypes: tuple = FLOATS
    grad: bool = True               # the op is differentiable: every case gets a finite-difference check
    check: Callable | None = None   # custom check(oarlock) for ops a numpy reference can't describe
    rtol: dict = field(default_factory=dict)  # per-dtype tolerance overrides
    call: Callable | None = None    # how to call the op (default: oarlock.<op>(*args, **kwargs))
    out_dtype: Callable | None = None  # out_dtype(dtype_under_test, *case.args, **case.kwargs) -> expected
    #                                    output dtype name; default: a float reference keeps the input dtype
