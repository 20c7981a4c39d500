"""Shape and indexing behaviour the op table can't express: errors, views, in-place rules, dtype
promotion of list ops, gradients of unused outputs and second derivatives."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock


def _t(values, dtype=None, grad=False):
    """A tensor of `values`: float64 for floats, otherwise numpy's dtype (int64, bool)."""
    values = np.asarray(values)
    t = oarlock.to_tensor(values, dtype=dtype or ("float64" if values.dtype.kind == "f" else None))
    t.stop_gradient = not grad
    return t


def _x(*shape, grad=False):
    return _t(np.arange(np.prod(shape), dtype=np.float64).reshape(shape), grad=grad)


@pytest.mark.parametrize("call, words", [
    (lambda: oarlock.transpose(_x(2, 3), [0, 0]), ["oarlock.transpose", "perm", "[0, 0]", "permutation"]),
    (lambda: oarlock.transpose(_x(2, 3), [0]), ["oarlock.transpose", "perm", "2 axes"]),
    (lambda: oarlock.squeeze(_x(1, 3), 2), ["oarlock.squeeze", "axis 2", "out of range"]),
    (lambda: oarlock.concat([_x(2, 3), _x(3, 3)], axis=1), ["oarlock.concat", "[2, 3]", "[3, 3]"]),
    (lambda: oarlock.concat([_t(1.0), _t(2.0)]), ["oarlock.concat", "0-d"]),
    (lambda: oarlock.concat([]), ["oarlock.concat", "empty list"]),
    (lambda: oarlock.stack([_x(2), _x(3)]), ["oarlock.stack", "same shape"]),
    (lambda: oarlock.split(_x(5), 2), ["oarlock.split", "size 5", "2 equal parts"]),
    (lambda: oarlock.split(_x(5), [2, -1, -1]), ["oarlock.split", "num_or_sections", "-1"]),
    (lambda: oarlock.split(_x(5), [2, 2]), ["oarlock.split", "add up", "5"]),
    (lambda: oarlock.split(_x(5), 0), ["oarlock.split", "positive"]),
    (lambda: oarlock.split(_x(6), 2, dim=0), ["oarlock.split", "dim"]),
    (lambda: oarlock.chunk(_x(5), 2), ["oarlock.chunk", "2 equal parts"]),
    (lambda: oarlock.flatten(_x(2, 3, 4), 2, 1), ["oarlock.flatten", "start_axis", "stop_axis"]),
    (lambda: oarlock.tile(_x(2), [-1]), ["oarlock.tile", "repeat_times", "non-negative"]),
    (lambda: oarlock.broadcast_to(_x(3, 1), [3]), ["oarlock.broadcast_to", "2-d", "1 dimensions"]),
    (lambda: oarlock.gather(_x(2, 3), _t([5], "int64")), ["oarlock.gather", "index", "[-2, 2)", "5"]),
    (lambda: oarlock.gather(_x(2, 3), _t([0.0])), ["oarlock.gather", "index", "float64"]),
    (lambda: oarlock.gather(_x(2, 3), _t([[0, 1]], "int64")), ["oarlock.gather", "index", "[1, 2]"]),
    (lambda: oarlock.index_select(_x(2, 3), _t(0, "int64")), ["oarlock.index_select", "1-D", "[]"]),
    (lambda: oarlock.masked_fill(_x(3), _t([1, 0, 1], "int64"), 1.0), ["oarlock.masked_fill", "mask", "int64"]),
    (lambda: oarlock.masked_fill(_x(3), _t([True]), _x(2)), ["oarlock.masked_fill", "value", "[2]"]),
    (lambda: _x(2, 3)[5], ["oarlock.getitem", "5", "out of bounds"]),
    (lambda: _x(2, 3)[1.5], ["oarlock.getitem", "valid indices"]),
    (lambda: _x(2, 3)[_t([0.5])], ["oarlock.getitem", "float64"]),
])
def test_errors_name_the_op_and_what_was_wrong(call, words):
    with pytest.raises((TypeError, ValueError, IndexError, NotImplementedError)) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


def test_paddle_index_rules():
    x = _x(2, 3, 4)
    assert _x(4)[0].shape == [] and _x(4)[0].item() == 0.0, "x[0] of a 1-D tensor is 0-d (Paddle 3)"
    assert x[0, :, [1, 2]].shape == [3, 2], "integers select before advanced indexing (Paddle, torch)"
    assert x[_t(1, "int64"), :, [1, 2]].shape == [3, 2], "a 0-d index tensor acts as an int"
    assert x[[0, 1], None, [0, 1]].shape == [2, 1, 4]
    assert x[True, 0, [0, 1]].shape == [2, 4]
    assert x[False].shape == [0, 2, 3, 4]
    assert x[[]].shape == [0, 3, 4]
    np.testing.assert_array_equal(x[x > 20].numpy(), [21.0, 22.0, 23.0])


def test_views_write_through():
    x = _x(3, 4)
    x[0][1] = 100.0
    x.reshape([12])[2] = 200.0
    oarlock.transpose(x, [1, 0])[3, 0] = 300.0
    x[:, 1:3][2] = oarlock.to_tensor([7.0, 8.0], dtype="float64")
    np.testing.assert_array_equal(x.numpy()[0], [0.0, 100.0, 200.0, 300.0])
    np.testing.assert_array_equal(x.numpy()[2], [8.0, 7.0, 8.0, 11.0])


def test_setitem_values_and_dtypes():
    z = oarlock.zeros([3], dtype="int64")
    assert oarlock.setitem_(z, 0, 2.7) is z, "setitem_ returns the tensor it modified"
    np.testing.assert_array_equal(z.numpy(), [2, 0, 0])
    m = oarlock.zeros([2, 3])
    m[[0, 0], [1, 1]] = oarlock.to_tensor([1.0, 2.0])  # repeated positions: the last write wins
    m[m == 0] = 5.0
    np.testing.assert_array_equal(m.numpy(), [[5, 2, 5], [5, 5, 5]])
    with pytest.raises(ValueError, match="broadcast"):
        m[0] = oarlock.ones([2])


def test_in_place_on_a_leaf_that_requires_grad_is_refused_and_tracked_elsewhere():
    w = _x(3, grad=True)
    with pytest.raises(RuntimeError, match="leaf Tensor that requires grad"):
        w[0] = 5.0
    y = w * 2.0
    y[0] = 1.0           # tracked: position 0 no longer depends on w
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 2.0, 2.0])
    z = oarlock.zeros([3], dtype="float64")
    z[1] = w[0] * 3.0    # z now depends on w through the written value
    assert not z.stop_gradient
    with oarlock.no_grad():  # optimizer-style updates are fine
        w[0] = 5.0
    assert w.numpy()[0] == 5.0 and not w.stop_gradient
    d = w.detach()
    d[1] = 6.0  # a tensor without a graph may be modified; it shares w's storage and version
    assert w.numpy()[1] == 6.0 and w.inplace_version == d.inplace_version == 2


def test_list_ops_promote_to_a_common_dtype():
    a, b = oarlock.ones([2], dtype="float32"), oarlock.ones([2], dtype="int64")
    assert oarlock.concat([a, b]).dtype == oarlock.float32
    assert oarlock.cat([b, _x(2)], dim=0).dtype == oarlock.float64
    assert oarlock.stack([a, _x(2)]).dtype == oarlock.float64


def test_public_names():
    x = _x(2, 3)
    assert x.transpose([1, 0]).shape == x.permute(1, 0).shape == oarlock.permute(x, [1, 0]).shape == [3, 2]
    assert oarlock.cat is not None and x.flatten().shape == [6] and x.tile([2]).shape == [2, 6]
    assert oarlock.flatten(input=_x(2, 3, 4), start_dim=1, end_dim=2).shape == [2, 12]
    assert [t.shape for t in x.split([1, 2], axis=1)] == [[2, 1], [2, 2]]
    assert [t.shape for t in x.chunk(3, dim=1)] == [[2, 1]] * 3
    assert x.gather(_t([1], "int64")).shape == [1, 3]
    assert x.index_select(_t([0, 0], "int64"), dim=1).shape == [2, 2]
    assert x.masked_fill(_t([True, False, True]), 0.0).numpy().sum() == 5.0
    assert x.broadcast_to([2, 2, 3]).shape == [2, 2, 3] and x.squeeze().shape == [2, 3]


def test_split_outputs_without_gradient_get_zeros():
    x = _x(2, 6, grad=True)
    a, _, c = oarlock.split(x, 3, axis=1)
    (a.sum() + (c * 2.0).sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 1, 0, 0, 2, 2]] * 2)
    y = _x(4, grad=True)
    oarlock.chunk(y, 2)[1].sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [0, 0, 1, 1])


@pytest.mark.parametrize("pick", [
    lambda x: x[[0, 2, 0], 1:],
    lambda x: x[x > 1.5],
    lambda x: oarlock.gather(x, _t([2, 2, 0], "int64"), axis=1),
    lambda x: oarlock.index_select(x, _t([1, 1], "int64")),
    lambda x: oarlock.masked_fill(x, _t([True, False, False]), 0.0),
    lambda x: oarlock.tile(x, [2, 1]),
    lambda x: oarlock.concat([x, x[1:]], axis=0),
])
def test_second_derivatives(pick):
    """d/dx of sum(2 * pick(x)**2) is 4 pick(x) scattered back; differentiating its sum once more
    must agree with finite differences of the first derivative."""
    x = _t(np.arange(1.0, 10.0).reshape(3, 3) / 3, grad=True)

    def first(xv):
        y = pick(xv)
        (g,) = oarlock.grad([(y * y * 2.0).sum()], [xv], create_graph=True)
        return g

    g = first(x)
    (h,) = oarlock.grad([(g * g).sum()], [x])
    numeric = np.zeros((3, 3))
    base = x.numpy()
    for idx in np.ndindex(3, 3):
        values = []
        for step in (1e-6, -1e-6):
            probe = base.copy()
            probe[idx] += step
            xp = _t(probe, grad=True)
            values.append(float((first(xp) * first(xp)).sum().item()))
        numeric[idx] = (values[0] - values[1]) / 2e-6
    np.testing.assert_allclose(h.numpy(), numeric, rtol=1e-5, atol=1e-5)


def test_reshape_zero_copies_the_input_size_as_paddle():
    """Paddle: a 0 in the target shape keeps x's size there, except when x has no elements (then 0 is a size)."""
    paddle = pytest.importorskip("paddle")
    for shape_in, target in [([3, 4], [0, 2, 2]), ([2, 3, 8], [0, 0, 2, -1]), ([2, 0], [0, 5]), ([2, 0], [5, 0]),
                             ([2, 0], [2, 0, 1]), ([0, 3], [0, 3, 0])]:
        want = paddle.reshape(paddle.zeros(shape_in), target).shape
        assert oarlock.reshape(oarlock.zeros(shape_in), target).shape == list(want), (shape_in, target)
