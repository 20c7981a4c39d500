"""Specs for the creation family (and the ops of oarlock_ops.tensor_api: ravel, copy_). Ops without
tensor inputs are checked by functions (their dtype rules, the torch-style keywords, the values);
random ops by seeding and statistics. The Python-level functions over these ops (the *_like family,
as_tensor, Tensor.new_*, ...) and the torch/Paddle oracles are in tests/test_paddle32_creation.py."""

import numpy as np
import pytest

from op_specs.base import ALL, ALL_REAL, FLOATS, INTS, Case, In, OpSpec


def _raises(fn, *words):
    """fn() must raise a clear error (TypeError/ValueError/NotImplementedError) naming every word."""
    with pytest.raises((TypeError, ValueError, NotImplementedError)) as info:
        fn()
    for word in words:
        assert word in str(info.value), f"error should mention {word!r}: {info.value}"


def _check_to_tensor(paddle):
    assert paddle.to_tensor([1.0, 2.0]).dtype == paddle.float32
    assert paddle.to_tensor([1, 2]).dtype == paddle.int64
    assert paddle.to_tensor(np.zeros(2)).dtype == paddle.float64
    assert paddle.to_tensor(True).dtype == paddle.bool
    src = np.arange(3.0)
    t = paddle.to_tensor(src)
    src[0] = 9
    assert t.numpy()[0] == 0, "to_tensor must copy its data"


def _check_fill(paddle, fn, value):
    a, b, c = fn(2, 3), fn([2, 3]), fn(size=(2, 3), dtype="int32")
    assert a.shape == b.shape == c.shape == fn(shape=[2, 3]).shape == [2, 3] and c.dtype == paddle.int32
    assert a.dtype == paddle.float32 and a.stop_gradient
    if value is not None:
        assert (a.numpy() == value).all() and (c.numpy() == value).all()
    assert fn([0, 3]).shape == [0, 3] and fn([]).shape == []
    assert fn([2], dtype="float64", device="cpu").dtype == paddle.float64
    assert fn([2], requires_grad=True).stop_gradient is False
    assert fn(2, dtype="bfloat16").dtype == paddle.bfloat16
    assert fn(2, pin_memory=True).shape == [2] and fn(2, 3, pin_memory=False, device="cpu").shape == [2, 3]
    out = paddle.full([2, 3], 5.0)
    assert fn(2, 3, out=out) is out and out.dtype == paddle.float32
    if value is not None:
        assert (out.numpy() == value).all()
    _raises(lambda: fn([2, -1.5]), "shape")
    _raises(lambda: fn(2, -3), fn.__name__, "shape", "-3")
    _raises(lambda: fn(2, 3, out=paddle.zeros([3])), fn.__name__, "out", "[3]")
    _raises(lambda: fn(2, pin_memory="yes"), fn.__name__, "pin_memory")


def _check_zeros(paddle):
    _check_fill(paddle, paddle.zeros, 0)


def _check_ones(paddle):
    _check_fill(paddle, paddle.ones, 1)


def _check_empty(paddle):
    _check_fill(paddle, paddle.empty, None)


def _check_full(paddle):
    # Paddle's dtype rule: bool -> bool, complex -> complex128, any other number -> default float
    assert paddle.full([2], 1.5).dtype == paddle.float32
    assert paddle.full([2], 1).dtype == paddle.float32
    assert paddle.full([2], True).dtype == paddle.bool
    assert paddle.full([2], 1 + 2j).dtype == paddle.complex128
    out = paddle.full([2, 3], 7, dtype="int64")
    assert out.dtype == paddle.int64 and (out.numpy() == 7).all()
    assert (paddle.full([2], 2.7, dtype="int32").numpy() == 2).all()
    assert paddle.full(size=[2, 2], fill_value=paddle.to_tensor(3.0)).numpy().tolist() == [[3, 3], [3, 3]]
    assert np.isinf(paddle.full([1], float("-inf")).numpy()).all()
    assert paddle.full([3], 0.5, requires_grad=True).stop_gradient is False
    assert paddle.full([0], 1.0).shape == [0]
    _raises(lambda: paddle.full([2], "x"), "full", "fill_value")


def _check_tensor(paddle):
    assert paddle.tensor([1.0, 2.0]).dtype == paddle.float32 and paddle.tensor([1, 2]).dtype == paddle.int64
    assert paddle.tensor(np.zeros(2)).dtype == paddle.float64 and paddle.tensor(3).shape == []
    t = paddle.tensor([1, 2], dtype="float64", device="cpu", requires_grad=True, pin_memory=False)
    assert t.dtype == paddle.float64 and t.place == "cpu" and t.requires_grad
    assert paddle.tensor([1.0], place="cpu").stop_gradient
    src = np.arange(3.0)
    copied = paddle.tensor(src)
    src[0] = 9
    assert copied.numpy()[0] == 0, "tensor() must copy its data"
    leaf = paddle.ones([2])
    leaf.stop_gradient = False
    c = paddle.tensor(leaf)
    assert c.stop_gradient and c.is_leaf, "tensor() of a tensor is a detached copy"
    _raises(lambda: paddle.tensor([1.0], dtype="float33"), "tensor", "dtype")
    _raises(lambda: paddle.tensor([1.0], requires_grad=1), "tensor", "requires_grad")


def _check_eye(paddle):
    assert paddle.eye(3).numpy().tolist() == np.eye(3).tolist() and paddle.eye(3).dtype == paddle.float32
    e = paddle.eye(2, 3, dtype="int64")
    assert e.dtype == paddle.int64 and e.numpy().tolist() == [[1, 0, 0], [0, 1, 0]]
    assert paddle.eye(n=2, m=4).shape == [2, 4] and paddle.eye(paddle.to_tensor(2)).shape == [2, 2]
    assert paddle.eye(0).shape == [0, 0]
    assert paddle.eye(2, requires_grad=True).stop_gradient is False
    _raises(lambda: paddle.eye(-1), "eye", "num_rows", "-1")
    _raises(lambda: paddle.eye(2.5), "eye", "num_rows")


def _check_arange(paddle):
    a = paddle.arange(5)
    assert a.dtype == paddle.int64 and a.numpy().tolist() == [0, 1, 2, 3, 4]
    assert paddle.arange(2, 8, 3).numpy().tolist() == [2, 5]
    assert paddle.arange(5, 1, -1).numpy().tolist() == [5, 4, 3, 2]
    f = paddle.arange(0.0, 1.0, 0.3)
    assert f.dtype == paddle.float32 and f.shape == [4]
    np.testing.assert_allclose(f.numpy(), [0, 0.3, 0.6, 0.9], rtol=1e-6)
    assert paddle.arange(1, 5.5).dtype == paddle.float32 and paddle.arange(1, 5.5).shape == [5]
    assert paddle.arange(5, dtype="float64").dtype == paddle.float64
    assert paddle.arange(4, dtype="bfloat16").numpy().astype(float).tolist() == [0, 1, 2, 3]
    assert paddle.arange(paddle.to_tensor(3)).numpy().tolist() == [0, 1, 2]
    assert paddle.arange(end=3).numpy().tolist() == [0, 1, 2]
    assert paddle.arange(3, 3).shape == [0]
    _raises(lambda: paddle.arange(0, 5, 0), "arange", "step")
    _raises(lambda: paddle.arange(3, dtype="bool"), "arange", "bool")


def _check_range(paddle):
    # closed interval [start, end]; the default float dtype whatever the arguments
    r = paddle.range(0, 5)
    assert r.dtype == paddle.float32 and r.numpy().tolist() == [0, 1, 2, 3, 4, 5]
    assert paddle.range(5).numpy().tolist() == [0, 1, 2, 3, 4, 5]
    assert paddle.range(5, 1, -2).numpy().tolist() == [5, 3, 1]
    assert paddle.range(0.5, 2.7, 0.5).numpy().tolist() == [0.5, 1, 1.5, 2, 2.5]
    assert paddle.range(0, 4, 2, dtype="int64").numpy().tolist() == [0, 2, 4]
    assert paddle.range(0, 4, dtype="int64").dtype == paddle.int64
    assert paddle.range(3, 3).numpy().tolist() == [3] and paddle.range(3, 2).shape == [0]
    assert paddle.range(0, 3, dtype="bfloat16").numpy().astype(float).tolist() == [0, 1, 2, 3]
    assert paddle.range(end=2, device="cpu", requires_grad=True).stop_gradient is False
    out = paddle.zeros([3])
    assert paddle.range(1, 3, out=out) is out and out.numpy().tolist() == [1, 2, 3]
    _raises(lambda: paddle.range(0, 5, 0), "range", "step", "0")
    _raises(lambda: paddle.range(0, 5, 0.5, dtype="int64"), "range", "step", "int64")
    _raises(lambda: paddle.range(3, dtype="bool"), "range", "bool")
    _raises(lambda: paddle.range(0, float("inf")), "range", "finite")


def _check_linspace(paddle):
    a = paddle.linspace(0, 1, 5)
    assert a.dtype == paddle.float32 and a.numpy().tolist() == [0, 0.25, 0.5, 0.75, 1]
    assert paddle.linspace(0, 7, 5, dtype="int32").numpy().tolist() == [0, 1, 3, 5, 7]  # truncates
    assert paddle.linspace(2, 3, 1).numpy().tolist() == [2] and paddle.linspace(0, 1, 0).shape == [0]
    assert paddle.linspace(1, 0, 3, dtype="float64").numpy().tolist() == [1, 0.5, 0]
    _raises(lambda: paddle.linspace(0, 1, -1), "linspace", "num")


def _check_copy_(paddle):
    x = paddle.zeros([2, 3])
    assert x.copy_(paddle.to_tensor([1, 2, 3])) is x, "copy_ returns the tensor itself"
    assert x.dtype == paddle.float32 and x.numpy().tolist() == [[1, 2, 3], [1, 2, 3]]  # broadcast, cast
    view = x.reshape([6])  # a view: copy_ writes through it
    x.copy_(paddle.full([2, 3], 2.5), non_blocking=True)
    assert (view.numpy() == 2.5).all()
    i = paddle.zeros([2], dtype="int32")
    i.copy_(paddle.to_tensor([1.9, -2.9]))
    assert i.dtype == paddle.int32 and i.numpy().tolist() == [1, -2]  # truncates, as torch does
    _raises(lambda: x.copy_(paddle.ones([2])), "copy_", "src", "[2]", "[2, 3]")
    _raises(lambda: x.copy_([1, 2, 3]), "copy_", "src", "Tensor")
    leaf = paddle.zeros([2])
    leaf.stop_gradient = False
    _raises(lambda: leaf.copy_(paddle.ones([2])), "copy_", "leaf")
    with paddle.no_grad():
        leaf.copy_(paddle.ones([2]))
    assert leaf.numpy().tolist() == [1, 1]


def _seeded(paddle, fn):
    paddle.seed(7)
    a = fn().numpy()
    paddle.seed(7)
    b = fn().numpy()
    paddle.seed(8)
    c = fn().numpy()
    assert np.array_equal(a, b), "the same seed must give the same values"
    assert not np.array_equal(a, c), "a different seed must give different values"
    return a.astype(np.float64)


def _check_random_keywords(paddle, fn):
    """The shared keyword surface of the float samplers."""
    assert fn([2, 3]).dtype == paddle.float32 and fn([2, 3]).shape == [2, 3]
    assert fn([4], dtype="float64").dtype == paddle.float64
    assert fn([4], dtype="bfloat16").dtype == paddle.bfloat16
    assert fn([0, 2]).shape == [0, 2] and fn([]).shape == []
    assert fn([2], requires_grad=True).stop_gradient is False and fn([2], device="cpu").stop_gradient
    _raises(lambda: fn([2], dtype="int64"), fn.__name__, "int64")


def _check_rand(paddle):
    _check_random_keywords(paddle, paddle.rand)
    assert paddle.rand(2, 3).shape == [2, 3] and paddle.rand(size=[3]).shape == [3]
    x = _seeded(paddle, lambda: paddle.rand([100_000]))
    assert 0 <= x.min() and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.std() - np.sqrt(1 / 12)) < 0.01
    low = paddle.rand([100_000], dtype="bfloat16").numpy().astype(np.float64)
    assert 0 <= low.min() and low.max() < 1 and abs(low.mean() - 0.5) < 0.01


def _check_randn(paddle):
    _check_random_keywords(paddle, paddle.randn)
    assert paddle.randn(2, 3).shape == [2, 3] and paddle.standard_normal([2]).dtype == paddle.float32
    x = _seeded(paddle, lambda: paddle.randn([100_000], dtype="float64"))
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1) < 0.02
    assert abs(np.mean(np.abs(x) < 1) - 0.6827) < 0.01  # the shape of the distribution, not just two moments


def _check_uniform_(paddle):
    x = paddle.zeros([100_000], dtype="float64")
    assert x.uniform_(min=2.0, max=5.0) is x and x.inplace_version == 1
    y = x.numpy()
    assert 2 <= y.min() and y.max() < 5 and abs(y.mean() - 3.5) < 0.03
    a = paddle.zeros([5]).uniform_(seed=3).numpy()
    assert np.array_equal(a, paddle.zeros([5]).uniform_(seed=3).numpy()) and -1 <= a.min() and a.max() < 1
    _raises(lambda: paddle.zeros([2]).uniform_(min=1.0, max=0.0), "uniform_", "min")


def _check_uniform(paddle):
    _check_random_keywords(paddle, paddle.uniform)
    x = _seeded(paddle, lambda: paddle.uniform([100_000]))
    assert -1 <= x.min() and x.max() < 1 and abs(x.mean()) < 0.02  # Paddle's default range [-1, 1)
    y = paddle.uniform([100_000], min=2.0, max=5.0, dtype="float64").numpy()
    assert 2 <= y.min() and y.max() < 5 and abs(y.mean() - 3.5) < 0.03 and abs(y.std() - np.sqrt(0.75)) < 0.02
    # a non-zero seed is a private stream: reproducible whatever the global generator did meanwhile
    a = paddle.uniform([5], seed=3).numpy()
    paddle.rand([10])
    assert np.array_equal(a, paddle.uniform([5], seed=3).numpy())
    _raises(lambda: paddle.uniform([2], min=1.0, max=0.0), "uniform", "min")


def _check_randint(paddle):
    a = paddle.randint(10, shape=[3])
    assert a.dtype == paddle.int64 and a.shape == [3] and paddle.randint(5).shape == [1]
    assert paddle.randint(0, 5, [2], dtype="int32").dtype == paddle.int32
    assert paddle.randint(low=3).numpy().max() < 3
    x = _seeded(paddle, lambda: paddle.randint(-3, 4, [100_000]))
    assert x.min() == -3 and x.max() == 3 and abs(x.mean()) < 0.03
    counts = np.bincount((x + 3).astype(int), minlength=7) / x.size
    assert np.abs(counts - 1 / 7).max() < 0.01, "every value in [low, high) should be equally likely"
    assert paddle.randint(0, 2, [0]).shape == [0]
    _raises(lambda: paddle.randint(3, 2), "randint", "low", "high")
    _raises(lambda: paddle.randint(0, 5, [2], dtype="float32"), "randint", "float32")


def _check_normal(paddle):
    assert paddle.normal(shape=[2, 3]).shape == [2, 3] and paddle.normal(shape=[2]).dtype == paddle.float32
    x = _seeded(paddle, lambda: paddle.normal(3.0, 2.0, [100_000]))
    assert abs(x.mean() - 3) < 0.03 and abs(x.std() - 2) < 0.03
    # tensor mean/std give the shape and dtype; shape is then ignored
    mean = paddle.to_tensor(np.array([0.0, 100.0, -100.0]))
    y = paddle.normal(mean, 0.1)
    assert y.shape == [3] and y.dtype == paddle.float64
    np.testing.assert_allclose(y.numpy(), [0, 100, -100], atol=1.0)
    z = paddle.normal(1.0, paddle.to_tensor(np.zeros((2, 2), np.float32)))
    assert z.shape == [2, 2] and z.dtype == paddle.float32 and (z.numpy() == 1).all()
    assert paddle.normal(mean=0, std=1, shape=[4]).dtype == paddle.float32  # int numbers: still float
    _raises(lambda: paddle.normal(0.0, -1.0, [2]), "normal", "std")


# dtypes: what each op accepts (documentation for the check-based specs, which test it themselves)
SPECS = [
    OpSpec("to_tensor", [], dtypes=ALL, check=_check_to_tensor, grad=False),
    OpSpec("tensor", [], dtypes=ALL, check=_check_tensor, grad=False),
    OpSpec("zeros", [], dtypes=ALL, check=_check_zeros, grad=False),
    OpSpec("ones", [], dtypes=ALL, check=_check_ones, grad=False),
    OpSpec("empty", [], dtypes=ALL, check=_check_empty, grad=False),
    OpSpec("full", [], dtypes=ALL, check=_check_full, grad=False),
    OpSpec("eye", [], dtypes=ALL, check=_check_eye, grad=False),
    OpSpec("arange", [], dtypes=ALL_REAL, check=_check_arange, grad=False),
    OpSpec("range", [], dtypes=ALL_REAL, check=_check_range, grad=False),
    OpSpec("linspace", [], dtypes=ALL_REAL, check=_check_linspace, grad=False),
    OpSpec("rand", [], dtypes=FLOATS, check=_check_rand, grad=False),
    OpSpec("randn", [], dtypes=FLOATS, check=_check_randn, grad=False),
    OpSpec("uniform", [], dtypes=FLOATS, check=_check_uniform, grad=False),
    OpSpec("uniform_", [], dtypes=FLOATS, check=_check_uniform_, grad=False),
    OpSpec("randint", [], dtypes=INTS, check=_check_randint, grad=False),
    OpSpec("normal", [], dtypes=FLOATS, check=_check_normal, grad=False),
    OpSpec("ravel", [Case([In((2, 3, 2))]), Case([In(())], name="0d"), Case([In((0, 3))], name="empty", grad=False)],
           ref=np.ravel, dtypes=ALL),
    OpSpec("copy_", [], dtypes=ALL, check=_check_copy_, grad=False),
    OpSpec("clone", [Case([In((2, 3))]), Case([In(())], name="0d"), Case([In((0, 3))], name="empty")],
           ref=lambda x: x.copy(), dtypes=ALL),
]

