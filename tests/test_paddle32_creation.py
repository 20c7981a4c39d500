"""Paddle 3.2's creation API: sizes as varargs / a list / size=, the common keywords (dtype, device,
requires_grad, pin_memory, out), the new functions (range, tensor, as_tensor, broadcast_shapes, ravel,
rand_like, ...), the torch-style Tensor methods (repeat, permute, type_as, new_*, copy_) and the Tensor
constructor; checked against numpy, torch (the torch-style names) and Paddle (range, Tensor(...)).

The per-op checks of the op table (tests/op_specs/creation.py) cover each op's own rules; this file
covers what is shared across functions and the comparisons with the oracles.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oarlock
from errors import raises_naming as _raises


def _torch_dtype(torch, dtype):
    return str(dtype).split(".")[-1] if isinstance(dtype, torch.dtype) else dtype


# -- 1. sizes ----------------------------------------------------------------------------------------------

SIZED = {  # name: (oarlock call with the size spelled by `spell`, torch call with a tuple)
    "zeros": (lambda spell: spell(oarlock.zeros), lambda t, s: t.zeros(s)),
    "ones": (lambda spell: spell(oarlock.ones), lambda t, s: t.ones(s)),
    "empty": (lambda spell: spell(oarlock.empty), lambda t, s: t.empty(s)),
    "rand": (lambda spell: spell(oarlock.rand), lambda t, s: t.rand(s)),
    "randn": (lambda spell: spell(oarlock.randn), lambda t, s: t.randn(s)),
    "uniform": (lambda spell: spell(oarlock.uniform), lambda t, s: t.empty(s).uniform_(-1, 1)),
}
SPELLINGS = {
    "varargs": lambda fn: fn(2, 3),
    "list": lambda fn: fn([2, 3]),
    "tuple": lambda fn: fn((2, 3)),
    "size": lambda fn: fn(size=[2, 3]),
    "shape": lambda fn: fn(shape=(2, 3)),
    "tensor": lambda fn: fn(oarlock.to_tensor([2, 3])),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("name", list(SIZED))
def test_sizes_as_varargs_list_or_size(torch, name, spelling):
    ours, theirs = SIZED[name]
    out = ours(SPELLINGS[spelling])
    ref = theirs(torch, (2, 3))
    assert out.shape == list(ref.shape) == [2, 3]
    assert out.dtype.name == _torch_dtype(torch, ref.dtype) == "float32"


def test_sizes_of_functions_whose_other_arguments_forbid_varargs(torch):
    assert oarlock.full(size=[2, 3], fill_value=1.5).numpy().tolist() == torch.full((2, 3), 1.5).tolist()
    assert oarlock.full((2, 3), 1.5).shape == oarlock.full(shape=[2, 3], fill_value=0).shape == [2, 3]
    r = oarlock.randint(0, 10, size=(2, 3))
    assert r.shape == list(torch.randint(0, 10, size=(2, 3)).shape) and r.dtype == oarlock.int64
    assert oarlock.randint(3, 7, (4,)).shape == [4]
    assert oarlock.normal(0.0, 1.0, size=[2, 3]).shape == list(torch.normal(0.0, 1.0, size=(2, 3)).shape)
    assert oarlock.normal(size=(4,)).dtype == oarlock.float32
    x = oarlock.ones([2])
    assert x.new_zeros(2, 3).shape == x.new_zeros([2, 3]).shape == x.new_zeros(size=(2, 3)).shape == [2, 3]


def test_every_sized_function_rejects_negative_sizes():
    for name, call in [("zeros", lambda: oarlock.zeros(2, -3)), ("ones", lambda: oarlock.ones([-1])),
                       ("empty", lambda: oarlock.empty(size=[-2])), ("full", lambda: oarlock.full([-1], 1.0)),
                       ("rand", lambda: oarlock.rand(-1, 2)), ("randn", lambda: oarlock.randn([-4])),
                       ("uniform", lambda: oarlock.uniform([-1])), ("randint", lambda: oarlock.randint(0, 3, [-1])),
                       ("normal", lambda: oarlock.normal(0.0, 1.0, [-2]))]:
        _raises(call, ValueError, f"oarlock.{name}()", "shape", "non-negative", "-")
    _raises(lambda: oarlock.ones([2]).new_zeros(2, -1), ValueError, "Tensor.new_zeros()", "size", "-1")
    _raises(lambda: oarlock.Tensor(3, -1), ValueError, "Tensor()", "non-negative", "-1")


# -- 1. the common keywords --------------------------------------------------------------------------------

X = np.arange(6, dtype=np.float32).reshape(2, 3)
COMMON = {  # name: f(**keywords) -> oarlock tensor, g(torch, **keywords) -> torch tensor (same meaning)
    "zeros": (lambda **k: oarlock.zeros([2, 3], **k), lambda t, **k: t.zeros((2, 3), **k)),
    "ones": (lambda **k: oarlock.ones(2, 3, **k), lambda t, **k: t.ones((2, 3), **k)),
    "empty": (lambda **k: oarlock.empty([2, 3], **k), lambda t, **k: t.empty((2, 3), **k)),
    "full": (lambda **k: oarlock.full([2, 3], 4, **k), lambda t, **k: t.full((2, 3), 4.0, **k)),
    "arange": (lambda **k: oarlock.arange(0.0, 6, 2, **k), lambda t, **k: t.arange(0.0, 6, 2, **k)),
    "eye": (lambda **k: oarlock.eye(2, 3, **k), lambda t, **k: t.eye(2, 3, **k)),
    "randn": (lambda **k: oarlock.randn(2, 3, **k), lambda t, **k: t.randn(2, 3, **k)),
    "rand": (lambda **k: oarlock.rand(2, 3, **k), lambda t, **k: t.rand(2, 3, **k)),
    "zeros_like": (lambda **k: oarlock.zeros_like(oarlock.to_tensor(X), **k),
                   lambda t, **k: t.zeros_like(t.tensor(X), **k)),
    "ones_like": (lambda **k: oarlock.ones_like(oarlock.to_tensor(X), **k),
                  lambda t, **k: t.ones_like(t.tensor(X), **k)),
    "empty_like": (lambda **k: oarlock.empty_like(oarlock.to_tensor(X), **k),
                   lambda t, **k: t.empty_like(t.tensor(X), **k)),
    "full_like": (lambda **k: oarlock.full_like(oarlock.to_tensor(X), 7, **k),
                  lambda t, **k: t.full_like(t.tensor(X), 7, **k)),
    "rand_like": (lambda **k: oarlock.rand_like(oarlock.to_tensor(X), **k),
                  lambda t, **k: t.rand_like(t.tensor(X), **k)),
    "randn_like": (lambda **k: oarlock.randn_like(oarlock.to_tensor(X), **k),
                   lambda t, **k: t.randn_like(t.tensor(X), **k)),
    "new_zeros": (lambda **k: oarlock.to_tensor(X).new_zeros(2, 3, **k),
                  lambda t, **k: t.tensor(X).new_zeros((2, 3), **k)),
    "new_full": (lambda **k: oarlock.to_tensor(X).new_full([2, 3], 7, **k),
                 lambda t, **k: t.tensor(X).new_full((2, 3), 7, **k)),
    "tensor": (lambda **k: oarlock.tensor([[1.0, 2.0, 3.0]], **k), lambda t, **k: t.tensor([[1.0, 2.0, 3.0]], **k)),
}
RANDOM_OR_EMPTY = {"empty", "randn", "rand", "empty_like", "rand_like", "randn_like"}


def _same_values(ours, ref):
    np.testing.assert_allclose(ours.numpy().astype(np.float64), ref.detach().numpy().astype(np.float64))


@pytest.mark.parametrize("name", list(COMMON))
def test_common_keywords_match_torch(torch, name):
    ours, theirs = COMMON[name]
    plain, ref = ours(), theirs(torch)
    assert plain.shape == list(ref.shape) and plain.dtype.name == _torch_dtype(torch, ref.dtype)
    assert plain.place == "cpu" and plain.stop_gradient and not plain.requires_grad
    if name not in RANDOM_OR_EMPTY:
        _same_values(plain, ref)
    # dtype, in each spelling
    for dtype in ("float64", oarlock.float64, np.float64):
        assert ours(dtype=dtype).dtype == oarlock.float64
    assert ours(dtype="float64").dtype.name == _torch_dtype(torch, theirs(torch, dtype=torch.float64).dtype)
    # device: a string or a Place
    assert ours(device="cpu").place == "cpu" and ours(device=oarlock.CPUPlace()).place is oarlock.CPUPlace()
    # requires_grad: a leaf that wants a gradient, like torch's
    leaf, ref_leaf = ours(requires_grad=True), theirs(torch, requires_grad=True)
    assert leaf.requires_grad is ref_leaf.requires_grad is True and leaf.is_leaf and not leaf.stop_gradient
    # pin_memory: accepted, changes nothing for a CPU tensor
    pinned = ours(pin_memory=True)
    assert pinned.place == "cpu" and pinned.shape == plain.shape and pinned.dtype == plain.dtype
    if name not in RANDOM_OR_EMPTY:
        assert np.array_equal(pinned.numpy(), plain.numpy())
    # the errors name the function and the argument
    _raises(lambda: ours(device="cpux"), (TypeError, ValueError), name, "cpux")
    _raises(lambda: ours(dtype="float33"), (TypeError, ValueError), name, "dtype", "float33")
    _raises(lambda: ours(requires_grad="yes"), TypeError, name, "requires_grad")
    _raises(lambda: ours(pin_memory=1), TypeError, name, "pin_memory")


def test_like_functions_keep_dtype_and_device_unless_given(torch):
    for dtype in ("float32", "float64", "bfloat16", "int32", "int64", "bool"):
        x = oarlock.zeros([2, 3], dtype=dtype)
        for fn in (oarlock.zeros_like, oarlock.ones_like, oarlock.empty_like):
            out = fn(x)
            assert out.shape == [2, 3] and out.dtype == dtype and out.place is x.place
        assert oarlock.full_like(x, 1).dtype == dtype
    i = oarlock.to_tensor([[1, 2]], dtype="int32")
    assert oarlock.full_like(i, 2.7).numpy().tolist() == torch.full_like(torch.tensor([[1, 2]], dtype=torch.int32),
                                                                           2.7).tolist()
    assert oarlock.ones_like(input=i).numpy().tolist() == [[1, 1]]
    assert oarlock.zeros_like(oarlock.zeros([0, 2])).shape == [0, 2]
    assert oarlock.ones_like(oarlock.to_tensor(3.0)).shape == []
    assert oarlock.full_like(i, oarlock.to_tensor(5)).numpy().tolist() == [[5, 5]]
    # the result never joins x's graph
    leaf = oarlock.ones([2], requires_grad=True)
    assert oarlock.zeros_like(leaf).stop_gradient and oarlock.rand_like(leaf).stop_gradient
    _raises(lambda: oarlock.zeros_like([1, 2]), TypeError, "zeros_like", "'x'", "Tensor", "list")
    _raises(lambda: oarlock.zeros_like(i, input=i), TypeError, "zeros_like", "input")
    _raises(lambda: oarlock.full_like(i), TypeError, "full_like", "fill_value")
    _raises(lambda: oarlock.full_like(i, "x"), TypeError, "full_like", "fill_value", "'x'")


def test_random_like_functions(torch):
    x = oarlock.zeros([1000, 100], dtype="float64")
    oarlock.seed(3)
    a = oarlock.rand_like(x)
    oarlock.seed(3)
    assert np.array_equal(a.numpy(), oarlock.rand_like(x).numpy()), "rand_like follows oarlock.seed"
    assert a.dtype == oarlock.float64 and 0 <= a.numpy().min() and a.numpy().max() < 1
    assert abs(a.numpy().mean() - 0.5) < 0.01
    n = oarlock.randn_like(x, dtype="float32").numpy()
    assert n.dtype == np.float32 and abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    ints = oarlock.zeros([2], dtype="int64")
    with pytest.raises(RuntimeError):
        torch.rand_like(torch.zeros(2, dtype=torch.int64))  # torch refuses integer samples too
    _raises(lambda: oarlock.rand_like(ints), TypeError, "rand_like", "int64", "dtype")
    _raises(lambda: oarlock.randn_like(x, dtype="int32"), TypeError, "randn_like", "int32")
    assert oarlock.rand_like(ints, dtype="float32").dtype == oarlock.float32


OUT_CALLS = {  # name: (call with out=, expected shape, expected values or None for random)
    "zeros": (lambda out: oarlock.zeros(2, 3, out=out), [2, 3], np.zeros((2, 3))),
    "ones": (lambda out: oarlock.ones([2, 3], out=out), [2, 3], np.ones((2, 3))),
    "empty": (lambda out: oarlock.empty(size=[2, 3], out=out), [2, 3], None),
    "full": (lambda out: oarlock.full([2, 3], 3.0, out=out), [2, 3], np.full((2, 3), 3.0)),
    "arange": (lambda out: oarlock.arange(0.0, 6.0, out=out), [6], np.arange(6.0)),
    "range": (lambda out: oarlock.range(0.0, 5.0, out=out), [6], np.arange(6.0)),
    "eye": (lambda out: oarlock.eye(2, 3, out=out), [2, 3], np.eye(2, 3)),
    "linspace": (lambda out: oarlock.linspace(0, 1, 5, out=out), [5], np.linspace(0, 1, 5)),
    "rand": (lambda out: oarlock.rand(2, 3, out=out), [2, 3], None),
    "randn": (lambda out: oarlock.randn(2, 3, out=out), [2, 3], None),
    "tensor": (lambda out: oarlock.tensor([1.0, 2.0], out=out), [2], np.array([1.0, 2.0])),
}


@pytest.mark.parametrize("name", list(OUT_CALLS))
def test_out_is_written_and_returned(torch, name):
    call, shape, values = OUT_CALLS[name]
    out = oarlock.full(shape, -7.0, dtype="float64")
    assert call(out) is out and out.shape == shape and out.dtype == oarlock.float64
    if values is not None:
        np.testing.assert_allclose(out.numpy(), values, rtol=1e-6)
    else:
        assert not (out.numpy() == -7).any()
    # torch's rule, which out= follows: the shape must match (torch resizes; Paddle and oarlock refuse)
    _raises(lambda: call(oarlock.zeros([7])), ValueError, name, "out", "[7]", str(shape))
    _raises(lambda: call([0.0] * 6), TypeError, name, "out", "Tensor")


def test_out_refuses_a_kind_losing_cast():
    _raises(lambda: oarlock.full([2], 1.5, out=oarlock.zeros([2], dtype="int64")), TypeError, "full", "float32",
            "int64")
    out = oarlock.zeros([3], dtype="float64")
    assert oarlock.arange(3, out=out) is out and out.numpy().tolist() == [0, 1, 2]  # int into float is fine


# -- 2. range (Paddle's closed interval) -------------------------------------------------------------------

RANGE_CASES = [(5,), (0, 5), (0, 5, 2), (5, 1, -1), (5, 1, -2), (0.5, 2.7, 0.5), (0, 1, 0.1), (0, 0.3, 0.1),
               (0, 1, 0.3), (-1, 1, 0.4), (1, 0, 1), (3, 3), (0, 10, 3), (-2.5, 2.5, 0.25)]


@pytest.mark.parametrize("args", RANGE_CASES, ids=str)
@pytest.mark.parametrize("dtype", [None, "float64", "int64", "int32"])
def test_range_matches_paddle(paddle, args, dtype):
    kwargs = {} if dtype is None else {"dtype": dtype}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = paddle.range(*args, **kwargs)
    except ValueError:  # a step that an integer dtype truncates to 0
        _raises(lambda: oarlock.range(*args, **kwargs), ValueError, "range", "step")
        return
    out = oarlock.range(*args, **kwargs)
    assert out.dtype.name == str(ref.dtype).split(".")[-1] and out.shape == list(ref.shape)
    assert np.array_equal(out.numpy(), ref.numpy()), f"{out.numpy()} != Paddle's {ref.numpy()}"


def test_range_against_numpy_and_torch(torch):
    # the closed interval: arange's half-open one plus the end, when it is reached exactly
    for args in [(0, 5, 1), (2, 11, 3), (4, -4, -2), (0.0, 2.0, 0.5)]:
        expected = np.arange(args[0], args[1] + args[2] / 2, args[2])
        np.testing.assert_allclose(oarlock.range(*args).numpy(), expected)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.range is deprecated in torch as well
            ref = torch.range(*args)
        np.testing.assert_allclose(oarlock.range(*args).numpy(), ref.numpy())
        assert oarlock.range(*args).dtype.name == _torch_dtype(torch, ref.dtype)
    assert oarlock.arange(0, 5).shape == [5] and oarlock.range(0, 5).shape == [6]


def test_range_errors():
    _raises(lambda: oarlock.range(0, 5, 0), ValueError, "oarlock.range()", "step", "0")
    _raises(lambda: oarlock.range(0, 5, 0.0), ValueError, "oarlock.range()", "step")
    _raises(lambda: oarlock.range(0, 5, 0.3, dtype="int32"), ValueError, "oarlock.range()", "step", "int32")
    _raises(lambda: oarlock.range(0, 5, dtype="bool"), (TypeError, ValueError), "oarlock.range()", "bool")
    _raises(lambda: oarlock.range(0, "5"), TypeError, "oarlock.range()", "end", "'5'")
    _raises(lambda: oarlock.range(0, float("nan")), ValueError, "oarlock.range()", "finite")


# -- 2. tensor, as_tensor ------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [[1, 2], [1.5, 2.0], [[True, False]], 3, 2.5, np.arange(3, dtype=np.int16),
                                  np.ones((2, 2), np.float64), [1 + 2j]], ids=repr)
def test_tensor_follows_torch_dtype_rules(torch, data):
    out, ref = oarlock.tensor(data), torch.tensor(data)
    assert out.dtype.name == _torch_dtype(torch, ref.dtype) and out.shape == list(ref.shape)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    if out.dtype.is_complex:
        return
    t = oarlock.tensor(data, dtype="float64", device="cpu", requires_grad=True)
    r = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    assert t.dtype == oarlock.float64 and t.requires_grad is r.requires_grad is True and t.is_leaf
    np.testing.assert_array_equal(t.numpy(), r.detach().numpy())


def test_as_tensor_shares_memory_like_torch(torch):
    a = np.arange(4.0)
    ours, ref = oarlock.as_tensor(a), torch.as_tensor(a)
    a[0] = 9
    assert ours.numpy()[0] == ref[0].item() == 9, "a numpy array of a kept dtype is wrapped, not copied"
    assert ours.dtype == oarlock.float64 and str(ref.dtype) == "torch.float64"
    # another dtype: a copy, in that dtype
    b = np.arange(3)
    cast, ref_cast = oarlock.as_tensor(b, dtype="float32"), torch.as_tensor(b, dtype=torch.float32)
    b[0] = 5
    assert cast.dtype == oarlock.float32 and cast.numpy()[0] == ref_cast[0].item() == 0
    # a tensor of the right dtype and device is returned itself
    t = oarlock.ones([2])
    assert oarlock.as_tensor(t) is t and oarlock.as_tensor(t, dtype="float32", device="cpu") is t
    tt = torch.ones(2)
    assert torch.as_tensor(tt) is tt
    # otherwise converted differentiably, as torch does (x.to(dtype))
    leaf = oarlock.ones([2], requires_grad=True)
    converted = oarlock.as_tensor(leaf, dtype="float64")
    assert converted.dtype == oarlock.float64 and not converted.stop_gradient
    converted.sum().backward()
    assert leaf.grad.numpy().tolist() == [1, 1]
    # Python data: copied, to_tensor's dtype rules (= torch's)
    for data in ([1, 2], [1.0], True):
        assert oarlock.as_tensor(data).dtype.name == _torch_dtype(torch, torch.as_tensor(data).dtype)
    # requires_grad: an unchanged tensor comes back detached (sharing memory), the caller's is untouched
    plain = oarlock.zeros([2])
    wants = oarlock.as_tensor(plain, requires_grad=True)
    assert wants is not plain and wants.requires_grad and plain.stop_gradient
    assert oarlock.as_tensor(np.zeros(2), requires_grad=True).requires_grad
    _raises(lambda: oarlock.as_tensor([1.0], dtype="float33"), TypeError, "as_tensor", "dtype")
    _raises(lambda: oarlock.as_tensor([1.0], device="tpu"), ValueError, "as_tensor", "device", "tpu")


# -- 2. broadcast_shapes, ravel, permute -------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [([2, 1], [3]), ((1, 3), (2, 1), (4, 1, 1)), ([5],), (), ([0, 1], [1, 4]),
                                    ([2, 3], 3), ([], [2, 2]), ([1], [1])], ids=str)
def test_broadcast_shapes_matches_numpy_and_torch(torch, shapes):
    out = oarlock.broadcast_shapes(*shapes)
    assert isinstance(out, list)
    assert out == list(np.broadcast_shapes(*[(s,) if isinstance(s, int) else tuple(s) for s in shapes]))
    assert out == list(torch.broadcast_shapes(*shapes))


def test_broadcast_shapes_errors():
    _raises(lambda: oarlock.broadcast_shapes([2, 3], [4]), ValueError, "broadcast_shapes", "shapes[1]", "[4]", "4",
            "3")
    _raises(lambda: oarlock.broadcast_shapes([2, -1]), ValueError, "broadcast_shapes", "shapes[0]", "-1")
    _raises(lambda: oarlock.broadcast_shapes([2, 1.5]), TypeError, "broadcast_shapes", "shapes[0]", "1.5")


def test_ravel_function_and_method(torch):
    host = np.arange(24.0).reshape(2, 3, 4).transpose(1, 0, 2)
    x = oarlock.to_tensor(host)
    for out in (oarlock.ravel(x), x.ravel(), oarlock.ravel(input=x)):
        np.testing.assert_array_equal(out.numpy(), torch.ravel(torch.tensor(host)).numpy())
    assert oarlock.ravel(oarlock.to_tensor(3.0)).shape == list(torch.ravel(torch.tensor(3.0)).shape) == [1]
    leaf = oarlock.to_tensor(np.ones((2, 3)), stop_gradient=False)
    (oarlock.ravel(leaf) * oarlock.arange(6.0, dtype="float64")).sum().backward()
    assert leaf.grad.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    _raises(lambda: oarlock.ravel([1, 2]), TypeError, "ravel", "x", "list")


def test_permute_function_and_method(torch):
    host = np.arange(24).reshape(2, 3, 4)
    x, ref = oarlock.to_tensor(host), torch.tensor(host)
    expected = ref.permute(2, 0, 1).numpy()
    for out in (x.permute(2, 0, 1), x.permute([2, 0, 1]), x.permute((2, 0, 1)), oarlock.permute(x, 2, 0, 1),
                oarlock.permute(x, [2, 0, 1]), oarlock.permute(x, dims=[2, 0, 1]), x.permute(-1, 0, 1)):
        np.testing.assert_array_equal(out.numpy(), expected)
    _raises(lambda: x.permute(0, 1), ValueError, "permute", "[0, 1]")


# -- 2. Tensor methods: repeat, type_as, new_*, copy_ ------------------------------------------------------

@pytest.mark.parametrize("shape,sizes", [((3,), (2,)), ((2, 2), (2, 3)), ((2, 2), (3, 1, 2)), ((), (4,)),
                                         ((2, 1), (1, 1)), ((2, 3), (0, 2))], ids=str)
def test_repeat_matches_torch(torch, shape, sizes):
    host = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    ref = torch.tensor(host).repeat(*sizes)
    for out in (oarlock.to_tensor(host).repeat(*sizes), oarlock.to_tensor(host).repeat(list(sizes)),
                oarlock.to_tensor(host).repeat(repeats=sizes)):
        assert out.shape == list(ref.shape)
        np.testing.assert_array_equal(out.numpy(), ref.numpy())


def test_repeat_gradient_and_errors(torch):
    host = np.arange(6.0).reshape(2, 3)
    weights = np.random.default_rng(0).standard_normal((2, 4, 6))
    x = oarlock.to_tensor(host, stop_gradient=False)
    (x.repeat(2, 2, 2) * oarlock.to_tensor(weights)).sum().backward()
    t = torch.tensor(host, requires_grad=True)
    (t.repeat(2, 2, 2) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
    y = oarlock.ones([2, 2])
    with pytest.raises(RuntimeError):
        torch.ones(2, 2).repeat(2)
    _raises(lambda: y.repeat(2), ValueError, "Tensor.repeat()", "2-d", "[2]")
    _raises(lambda: y.repeat(2, -1), ValueError, "Tensor.repeat()", "repeats", "-1")
    _raises(lambda: y.repeat(2.0, 1), TypeError, "Tensor.repeat()", "repeats")
    _raises(lambda: y.repeat([1, 1], repeats=[1, 1]), TypeError, "Tensor.repeat()", "repeats")
    _raises(lambda: y.repeat(), TypeError, "Tensor.repeat()", "repeats")
    scalar = oarlock.to_tensor(2.0)
    copy = scalar.repeat([])  # no sizes for no axes: a copy, as torch gives
    assert copy.shape == [] and copy.item() == 2 and copy._data is not scalar._data


def test_type_as_matches_torch(torch):
    for a, b in [("float32", "int64"), ("int32", "float64"), ("float64", "float64"), ("bool", "float32")]:
        x, other = oarlock.ones([2], dtype=a), oarlock.zeros([1], dtype=b)
        ref = torch.ones(2, dtype=getattr(torch, a)).type_as(torch.zeros(1, dtype=getattr(torch, b)))
        out = x.type_as(other)
        assert out.dtype.name == _torch_dtype(torch, ref.dtype) and out.numpy().tolist() == ref.tolist()
    same = oarlock.ones([2])
    assert same.type_as(oarlock.zeros([3])) is same  # torch returns self when nothing changes
    leaf = oarlock.ones([2], requires_grad=True)
    leaf.type_as(oarlock.zeros([1], dtype="float64")).sum().backward()
    assert leaf.grad.numpy().tolist() == [1, 1]
    _raises(lambda: same.type_as("float64"), TypeError, "type_as", "other", "str")


def test_new_methods_match_torch(torch):
    host = np.ones((2, 2), np.int32)
    x, ref = oarlock.to_tensor(host), torch.tensor(host)
    empty = x.new_empty((1, 2))
    assert empty.shape == [1, 2] and empty.dtype == oarlock.int32 and str(ref.new_empty((1, 2)).dtype) == "torch.int32"
    pairs = [(x.new_zeros(2, 3), ref.new_zeros(2, 3)), (x.new_ones([3]), ref.new_ones([3])),
             (x.new_full([2], 3.7), ref.new_full([2], 3.7)),
             (x.new_zeros(size=[2], dtype="float64"), ref.new_zeros(size=[2], dtype=torch.float64)),
             (x.new_ones(2, dtype="bool"), ref.new_ones(2, dtype=torch.bool)),
             (x.new_full((1,), True), ref.new_full((1,), True)), (x.new_zeros([]), ref.new_zeros([]))]
    for ours, theirs in pairs:
        assert ours.shape == list(theirs.shape) and ours.dtype.name == _torch_dtype(torch, theirs.dtype)
        assert ours.place is x.place and ours.stop_gradient
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    grad = oarlock.zeros([1]).new_ones(2, requires_grad=True, device="cpu", pin_memory=True)
    assert grad.requires_grad and grad.dtype == oarlock.float32
    _raises(lambda: x.new_full([2]), TypeError, "new_full", "fill_value")
    _raises(lambda: x.new_full([2], "a"), TypeError, "new_full", "fill_value")
    _raises(lambda: x.new_zeros(2, size=[2]), TypeError, "new_zeros", "size")
    _raises(lambda: x.new_ones([2.5]), TypeError, "new_ones", "size", "2.5")
    _raises(lambda: x.new_empty(2, dtype="float33"), TypeError, "new_empty", "dtype", "float33")


@pytest.mark.parametrize("dst,src", [(((2, 3), "float32"), ((3,), "int64")), (((2, 2), "int32"), ((2, 2), "float64")),
                                     (((3,), "float64"), ((), "float32")), (((2,), "bool"), ((2,), "int64")),
                                     (((0, 2), "float32"), ((2,), "float32"))], ids=str)
def test_copy_matches_torch(torch, dst, src):
    rng = np.random.default_rng(1)
    dst_host = np.zeros(dst[0], dtype=dst[1])
    src_host = (rng.standard_normal(src[0]) * 3).astype(src[1])
    x, t = oarlock.to_tensor(dst_host), torch.tensor(dst_host)
    assert x.copy_(oarlock.to_tensor(src_host)) is x
    t.copy_(torch.tensor(src_host))
    assert x.dtype.name == _torch_dtype(torch, t.dtype) and x.shape == list(t.shape)
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_copy_refuses_what_it_cannot_do():
    x = oarlock.zeros([2, 3])
    _raises(lambda: x.copy_(oarlock.ones([3, 3])), ValueError, "copy_", "src", "[3, 3]", "[2, 3]")
    _raises(lambda: x.copy_(np.ones(3)), TypeError, "copy_", "src", "ndarray")
    source = oarlock.ones([3], requires_grad=True)
    with oarlock.no_grad():
        x.copy_(source)
    assert (x.numpy() == 1).all() and x.stop_gradient
    x.copy_(source * 2.0)   # under autograd: x now depends on source (broadcast over x's rows)
    assert not x.stop_gradient and (x.numpy() == 2).all()
    x.sum().backward()
    np.testing.assert_array_equal(source.grad.numpy(), [4.0, 4.0, 4.0])


# -- 3. the Tensor constructor --------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [(2, 3), (5,), (0,), (), (np.int64(2), 2)], ids=str)
def test_tensor_constructor_with_sizes_matches_torch_and_paddle(torch, paddle, args):
    out = oarlock.Tensor(*args)
    ref = torch.Tensor(*args)
    assert out.shape == list(ref.shape)
    if all(isinstance(a, int) for a in args):  # Paddle's constructor takes Python ints only
        assert out.shape == list(paddle.Tensor(*args).shape)
    assert out.dtype == oarlock.float32 and out.dtype.name == _torch_dtype(torch, ref.dtype)
    assert out.stop_gradient and out.is_leaf and out.place == "cpu"
    typed = oarlock.Tensor(*args, dtype="int64", place="cpu", stop_gradient=False)
    assert typed.dtype == oarlock.int64 and typed.shape == out.shape and typed.requires_grad


@pytest.mark.parametrize("data", [[2, 3], [[1.5, 2.0]], [True, False], (1, 2, 3)], ids=str)
def test_tensor_constructor_with_data_matches_torch_and_paddle(torch, paddle, data):
    out, ref = oarlock.Tensor(data), torch.Tensor(data)
    assert out.shape == list(ref.shape) and out.dtype.name == _torch_dtype(torch, ref.dtype) == "float32"
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert out.dtype.name == str(paddle.Tensor(data).dtype).split(".")[-1]


def test_tensor_constructor_keyword_forms_and_arrays(paddle):
    arr = np.arange(3)
    assert oarlock.Tensor(arr).dtype.name == str(paddle.Tensor(arr).dtype).split(".")[-1] == "int64"
    kept = oarlock.Tensor(arr)
    arr[0] = 7
    assert kept.numpy()[0] == 0, "Tensor(data) copies"
    t = oarlock.Tensor([1, 2], dtype="float64", place="cpu", stop_gradient=False)
    assert t.dtype == oarlock.float64 and t.requires_grad and t.is_leaf
    assert oarlock.Tensor([1, 2], "int32").dtype == oarlock.int32
    assert oarlock.Tensor([1.0], None, "cpu", False).stop_gradient is False
    assert oarlock.Tensor(data=[1, 2]).numpy().tolist() == [1.0, 2.0]
    assert oarlock.Tensor(2.5).shape == [] and oarlock.Tensor(2.5).item() == 2.5
    assert oarlock.Tensor(oarlock.ones([2], dtype="int32")).dtype == oarlock.int32
    assert oarlock.Tensor([1 + 1j]).dtype.is_complex
    assert isinstance(oarlock.Tensor(2), oarlock.Tensor)
    _raises(lambda: oarlock.Tensor([1.0], "float32", dtype="float64"), TypeError, "Tensor()", "dtype")
    _raises(lambda: oarlock.Tensor([1.0], "float32", "cpu", True, 5), TypeError, "Tensor()", "5")
    _raises(lambda: oarlock.Tensor(-2), ValueError, "Tensor()", "-2")
    _raises(lambda: oarlock.Tensor([1.0], stop_gradient="no"), TypeError, "Tensor()", "stop_gradient", "'no'")
