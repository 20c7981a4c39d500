"""The dispatcher's hook for Tensor subclasses (`__oarlock_dispatch__`, what distributed tensors build on): an op
called with an instance among its tensor arguments, in any position or inside a tensor list, goes to the class's
handler with the op, the tensor arguments and the converted attributes; plain tensors never reach it."""

import numpy as np
import pytest

import oarlock
from oarlock.dispatch import apply
from oarlock.plugin_api import array_of


class Tagged(oarlock.Tensor):
    """A tensor subclass that unwraps itself, runs the op on plain tensors and wraps the results back."""

    __slots__ = ("inner",)
    calls: list = []

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __oarlock_dispatch__(cls, op, args, attrs):
        cls.calls.append((op.name, sorted(attrs)))

        def plain(a):
            if isinstance(a, (list, tuple)):
                return [plain(x) for x in a]
            return a.inner if isinstance(a, Tagged) else a

        out = apply(op, tuple(plain(a) for a in args), attrs)
        return type(out)(map(Tagged, out)) if isinstance(out, (tuple, list)) else Tagged(out)


def _t(values):
    return oarlock.to_tensor(np.asarray(values, dtype="float32"))


@pytest.fixture(autouse=True)
def _clear():
    Tagged.calls.clear()


def test_ops_with_a_subclass_argument_in_any_position_go_to_its_handler():
    x, y = _t([1.0, 2.0]), _t([3.0, 5.0])
    outs = [oarlock.add(Tagged(x), y), oarlock.add(x, Tagged(y)), Tagged(x) * y]
    for out, want in zip(outs, ([4.0, 7.0], [4.0, 7.0], [3.0, 10.0])):
        assert isinstance(out, Tagged)
        np.testing.assert_array_equal(array_of(out.inner), want)
    assert [name for name, _ in Tagged.calls] == ["add", "add", "multiply"]
    summed = oarlock.sum(Tagged(x), axis=0, keepdim=True)
    assert Tagged.calls[-1] == ("sum", ["axis", "dtype", "keepdim"]) and isinstance(summed, Tagged)
    np.testing.assert_array_equal(array_of(summed.inner), [3.0])


def test_a_subclass_inside_a_tensor_list_and_several_outputs():
    x, y = _t([1.0, 2.0]), _t([3.0, 4.0])
    joined = oarlock.concat([x, Tagged(y)])
    np.testing.assert_array_equal(array_of(joined.inner), [1.0, 2.0, 3.0, 4.0])
    parts = oarlock.split(Tagged(joined.inner), 2)
    assert len(parts) == 2 and all(isinstance(p, Tagged) for p in parts)
    assert [name for name, _ in Tagged.calls][:1] == ["concat"]


def test_plain_tensors_never_reach_the_handler():
    x = _t([1.0, 2.0])
    (x + x).sum()
    assert Tagged.calls == []
