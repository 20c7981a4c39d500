"""A third-party plugin that creates namespaces the core knows nothing about:

- oarlock.incubate (declared, with a docstring), oarlock.incubate.nn.functional.swiglu;
- oarlock.distributed.fleet.init and oarlock.distributed.fleet.meta_parallel.PipelineLayer (children of a
  real core package);
- an internal op, nsdemo_twice (only oarlock.ops.nsdemo.nsdemo_twice), and the Tensor method nsdemo_double
  that calls it through the callable ops.define returned.

It imports one of its own namespaces at its top, before it is registered, as plugins do with
oarlock.nn.functional, and (through .layers) subclasses another plugin's oarlock.nn.Layer at import time,
which resolves because the plugin manager registered that plugin ("nn") before this one ("nsdemo").
"""

from oarlock import hookimpl
from oarlock.incubate.nn import functional as incubate_functional  # resolved lazily, at call time
from oarlock_nsdemo.layers import Scale

_twice = None  # the internal op, set by oarlock_register_ops


def swiglu(x, y=None):
    """silu(x) * y; with y None, x is split in two along its last axis."""
    import oarlock
    if y is None:
        x, y = oarlock.chunk(x, 2, axis=-1)
    return oarlock.nn.functional.silu(x) * y


def swiglu_twice(x):
    """swiglu through this plugin's own namespace module, imported at the top of the plugin."""
    return incubate_functional.swiglu(x) * 2


class PipelineLayer:
    """A stand-in for fleet's PipelineLayer."""

    def __init__(self, layers):
        self.layers = list(layers)


def init(is_collective=False):
    return "fleet initialised"


def nsdemo_double(self):
    return _twice(self)


@hookimpl
def oarlock_register_ops(ops):
    global _twice
    _twice = ops.define("nsdemo_twice(x: Tensor) -> Tensor", internal=True, doc="2 * x (an internal op).")
    ops.kernel("nsdemo_twice")(lambda xp, x: x * 2)


@hookimpl
def oarlock_register_api(api):
    api.namespace("oarlock.incubate", doc="oarlock.incubate: incubating APIs (from the nsdemo test plugin).")
    api.export("oarlock.incubate.nn.functional", "swiglu", swiglu)
    api.export("oarlock.incubate.nn.functional", "swiglu_twice", swiglu_twice)
    api.export("oarlock.incubate.nn", "Scale", Scale)
    api.export("oarlock.distributed.fleet", "init", init)
    api.export("oarlock.distributed.fleet.meta_parallel", "PipelineLayer", PipelineLayer)
    api.export("Tensor", "nsdemo_double", nsdemo_double)
