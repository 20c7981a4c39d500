"""In-place autograd, specified against PyTorch: in-place Tensor methods, augmented assignment, __setitem__ and
writes through views on tensors that are part of a graph. Their forward values and the gradient of every leaf
must match torch's (float64 inputs from numpy, rtol=1e-10, atol=1e-12).

Also specified against torch: the "modified by an inplace operation" error raised at backward time when a
tensor that an op saved for its backward was changed in place afterwards (and no error where torch has none);
the error for an in-place op on a leaf that requires grad (and that the same op works under no_grad, optimizer
style); and the version counter (`inplace_version`, as in Paddle, with torch's `_version` as an alias) that
counts in-place writes and is shared by a view and its base. Augmented assignment (+=, -=, *=, /=) writes in
place, as in torch; Paddle 3.2 has no __iadd__ and rebinds the name instead, so the tests that need the write to
be in place (alias, version, leaf error) are grouped apart from the table, which holds for either reading.

Every case is a small function written once and run on both frameworks through a thin adapter (`Ours`,
`Theirs`) that spells the few calls whose names differ; where the op itself has no torch equivalent
(Paddle's scale_) the case carries a torch twin. oarlock follows Paddle 3.2's API, so the cases only use
in-place methods that paddle.Tensor 3.2 has -- `test_the_cases_use_only_paddle_32_inplace_apis` checks it:
  Tensor: add_ subtract_ mul_ multiply_ div_ divide_ scale_ exp_ sqrt_ rsqrt_ tanh_ sigmoid_ clip_ zero_ fill_
          pow_ abs_ neg_ reciprocal_ floor_ ceil_ round_ square_ copy_ uniform_ (and __setitem__, +=, -=, *=, /=)
  nn.functional: relu_   (Paddle 3.2 has no Tensor.sub_ nor Tensor.relu_; F.sigmoid_ does not exist either)
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import oarlock

RTOL, ATOL = 1e-10, 1e-12
MODIFIED = "modified by an inplace operation"


# -- the adapters ------------------------------------------------------------------------------------------------

class _Functional:
    """oarlock.nn.functional, imported on first use (an import problem fails the cases, not collection)."""

    def __get__(self, obj, owner):
        import oarlock.nn.functional

        return oarlock.nn.functional


class Ours:
    name = "oarlock"
    F = _Functional()

    @staticmethod
    def leaf(a):
        return oarlock.to_tensor(a, stop_gradient=False)

    @staticmethod
    def const(a):
        return oarlock.to_tensor(a)

    @staticmethod
    def permute(t, perm):
        return t.transpose(perm)

    @staticmethod
    def numpy(t):
        return t.numpy()

    @staticmethod
    def grad(t):
        return None if t.grad is None else t.grad.numpy()

    @staticmethod
    def no_grad():
        return oarlock.no_grad()

    @staticmethod
    def requires_grad(t):
        return not t.stop_gradient

    @staticmethod
    def version(t):
        v = t.inplace_version
        assert t._version == v, "Tensor._version must be an alias of Tensor.inplace_version"
        return v


class Theirs:
    """torch, behind the same names."""

    name = "torch"

    def __init__(self, torch):
        self.torch = torch
        self.F = torch.nn.functional

    def leaf(self, a):
        return self.torch.tensor(a, requires_grad=True)

    def const(self, a):
        return self.torch.tensor(a)

    @staticmethod
    def permute(t, perm):
        return t.permute(perm)

    @staticmethod
    def numpy(t):
        return t.detach().numpy()

    @staticmethod
    def grad(t):
        return None if t.grad is None else t.grad.numpy()

    def no_grad(self):
        return self.torch.no_grad()

    @staticmethod
    def requires_grad(t):
        return t.requires_grad

    @staticmethod
    def version(t):
        return t._version


# -- inputs (float64, fixed) ---------------------------------------------------------------------------------------

_rng = np.random.default_rng(20240611)
ARR = {
    "A": _rng.standard_normal((3, 4)),
    "B": _rng.standard_normal((3, 4)),
    "P": _rng.uniform(0.5, 2.0, (3, 4)),           # positive: sqrt, rsqrt, reciprocal, div, pow with a tensor
    "Q": _rng.uniform(0.5, 2.0, (3, 4)),
    "R4": _rng.standard_normal(4),                  # broadcasts over the rows of a [3, 4]
    "C3": _rng.standard_normal(3),                  # a column of a [3, 4]
    "S1": _rng.standard_normal(1),
    "V24": _rng.standard_normal((2, 4)),            # two rows of a [3, 4]
    "W43": _rng.standard_normal((4, 3)),            # a [3, 4] transposed / reshaped
    "W44": _rng.standard_normal((4, 4)),
    "T234": _rng.standard_normal((2, 3, 4)),
    "T423": _rng.standard_normal((4, 2, 3)),        # T234 permuted by [2, 0, 1]
}
MASK = np.array([[True, False, True, False], [False, False, True, True], [True, True, False, False]])
ARR["M"] = _rng.standard_normal(int(MASK.sum()))    # the values written by x[MASK] = v
IDX = np.array([2, 0], dtype="int64")
ZEROS34 = np.zeros((3, 4))


@dataclass(frozen=True)
class Case:
    id: str
    fn: Callable            # fn(fw, *leaves) -> the output tensor; leaves are made from ARR[name] for name in inputs
    inputs: str             # space-separated ARR keys
    torch_fn: Callable | None = None  # torch twin, only where the API has no torch spelling

    def run(self, fw, torch_side: bool):
        leaves = [fw.leaf(ARR[k]) for k in self.inputs.split()]
        fn = self.torch_fn if torch_side and self.torch_fn is not None else self.fn
        return leaves, fn(fw, *leaves)


# -- cases written as statements (augmented assignment, __setitem__, views, chains) -----------------------------------

def _iadd(fw, x, r):
    h = x * 1.0
    h += r
    return h


def _imul_scalar(fw, x):
    h = x * 1.0
    h *= 2
    return h * x


def _imul_tensor(fw, x, y):
    h = x + 0.0
    h *= y
    return h


def _isub(fw, x, r):
    h = x * 1.0
    h -= r
    return h


def _idiv_scalar(fw, x):
    h = x * 1.0
    h /= 2
    return h * h


def _set_mask_tensor(fw, x, m):
    h = x * 1.0
    h[fw.const(MASK)] = m
    return h


def _set_slice(fw, x, v):      # destination and value both need gradients
    h = x * 1.0
    h[1:3] = v
    return h * x


def _set_column(fw, x, c):
    h = x * 2.0
    h[:, 0] = c
    return h


def _set_index_tensor(fw, x, v):
    h = x * 1.0
    h[fw.const(IDX)] = v
    return h


def _set_row_scalar(fw, x):
    h = x * 1.0
    h[0] = 5.0
    return h * h


def _set_broadcast(fw, x, r):  # a [4] value written into two rows: its gradient sums over them
    h = x * 1.0
    h[0:2] = r
    return h


def _set_broadcast_one(fw, x, s):
    h = x * 1.0
    h[1] = s
    return h.exp()


def _set_mask_zero(fw, x):
    h = x.exp()
    h2 = h * 1.0
    h2[fw.const(MASK)] = 0
    return h2


def _set_row_then_square(fw, x, r):
    h = x * 1.0
    h[1] = r
    return h * h


def _set_const_value(fw, x):   # the value needs no gradient
    h = x * 1.0
    h[1:3] = fw.const(ARR["V24"])
    return h


def _set_into_const(fw, v):    # the destination needs no gradient, the value does
    z = fw.const(ZEROS34)
    z[1:3] = v
    return z


def _mul_into_const(fw, w):
    z = fw.const(ARR["Q"])
    z.mul_(w)
    return z


def _copy_into_const(fw, w):
    z = fw.const(ZEROS34)
    z.copy_(w)
    return z * 3.0


def _view_of_const(fw, r):
    z = fw.const(ZEROS34)
    v = z[1:3]
    v.add_(r)
    return z


def _view_slice(fw, x):
    h = x * 1.0
    v = h[1:3]
    v.mul_(2)
    return h * x


def _view_slice_tensor(fw, x, y):
    h = x * 1.0
    v = h[1:3]
    v.mul_(y)
    return h


def _view_row_exp(fw, x):
    h = x * 1.0
    v = h[0]
    v.exp_()
    return h + v


def _view_column(fw, x, c):
    h = x * 1.0
    v = h[:, 1]
    v.mul_(c)
    return h.sum(1) * v


def _view_reshape(fw, x, w):
    h = x * 1.0
    v = h.reshape([4, 3])
    v.mul_(w)
    return h


def _view_reshape_flat(fw, x):
    h = x * 1.0
    v = h.reshape([12])
    v[0:5].zero_()
    return h * x


def _view_T(fw, x, w):
    h = x * 1.0
    v = h.T
    v.mul_(w)
    return h


def _view_t(fw, x, w):
    h = x * 1.0
    v = h.t()
    v.add_(w)
    return h * h


def _view_permute(fw, x, w):
    h = x * 1.0
    v = fw.permute(h, [2, 0, 1])
    v.mul_(w)
    return h


def _view_nested(fw, x, v24):
    h = x * 1.0
    v = h[1:][0:2]
    v.mul_(v24)
    return h


def _base_write_view_read(fw, x, y):
    h = x * 1.0
    v = h[1:3]
    h.mul_(y)                  # the view sees the write to its base
    return v * 1.0


def _chain_setitem_and_ops(fw, x, y, r, c):
    h = x * 1.0
    h[0] = r
    h.mul_(y)
    h[:, 1] = c
    return h.tanh_()


def _chain_arith(fw, x, y):
    h = x * 1.0
    h.add_(y)
    h.mul_(y)
    h.subtract_(x)
    return h


def _saved_by_add(fw, x, w):   # add saves nothing: modifying its input later is fine
    h = x * 1.0
    y = h + w
    h.mul_(2)
    return y + h


def _saved_by_scalar_mul(fw, x):  # x * 3.0 needs no copy of x for its gradient
    h = x * 1.0
    y = h * 3.0
    h.add_(1)
    return y * 1.0


def _saved_by_const_mul(fw, x):   # torch saves mul's `self` only when `other` needs a gradient
    h = x * 1.0
    y = h * fw.const(ARR["Q"])
    h.add_(1)
    return y


def _input_of_exp(fw, x):      # exp saves its output, not its input
    h = x * 1.0
    y = h.exp()
    h.mul_(2)
    return y + h


def _input_of_sigmoid(fw, x):
    h = x * 1.0
    y = h.sigmoid()
    h.add_(1)
    return y * h


def _output_of_add_after_exp(fw, x):
    y = x.exp()
    z = y + 1.0
    z.mul_(2.0)
    return z


def _sum_then_zero(fw, x):
    h = x * 1.0
    s = h.sum()
    h.zero_()
    return h + s


CASES = [
    # elementwise in-place methods on a non-leaf
    Case("add_", lambda fw, x, y: (x * 1.0).add_(y), "A B"),
    Case("add_-broadcast", lambda fw, x, r: (x * 1.0).add_(r), "A R4"),
    Case("add_-scalar", lambda fw, x: (x * 2.0).add_(2.5) * x, "A"),
    Case("subtract_", lambda fw, x, y: (x * 1.0).subtract_(y) * x, "A B"),
    Case("mul_", lambda fw, x, y: (x * 1.0).mul_(y), "A B"),
    Case("mul_-scalar", lambda fw, x: (x * 1.0).mul_(3.0) * x, "A"),
    Case("multiply_-broadcast", lambda fw, x, r: (x * 2.0).multiply_(r), "A R4"),
    Case("div_", lambda fw, x, p: (x * 1.0).div_(p), "A P"),
    Case("divide_", lambda fw, p, q: (p + 0.0).divide_(q) * p, "P Q"),
    Case("scale_", lambda fw, x: (x * 1.0).scale_(2.5), "A", torch_fn=lambda fw, x: (x * 1.0).mul_(2.5)),
    Case("scale_-bias", lambda fw, x: (x * 1.0).scale_(2.0, bias=1.0) * x, "A",
         torch_fn=lambda fw, x: (x * 1.0).mul_(2.0).add_(1.0) * x),
    Case("scale_-bias_before", lambda fw, x: (x * 1.0).scale_(2.0, 1.0, bias_after_scale=False), "A",
         torch_fn=lambda fw, x: (x * 1.0).add_(1.0).mul_(2.0)),
    Case("exp_", lambda fw, x: (x * 0.5).exp_(), "A"),
    Case("sqrt_", lambda fw, p: (p * 1.0).sqrt_(), "P"),
    Case("rsqrt_", lambda fw, p: (p * 1.0).rsqrt_(), "P"),
    Case("tanh_", lambda fw, x: (x * 1.0).tanh_(), "A"),
    Case("sigmoid_", lambda fw, x: (x * 1.0).sigmoid_() * x, "A"),
    Case("F.relu_", lambda fw, x: fw.F.relu_(x * 1.0), "A"),
    Case("clip_", lambda fw, x: (x * 1.0).clip_(-0.5, 0.5), "A"),
    Case("clip_-min", lambda fw, x: (x * 1.0).clip_(min=-0.2) * x, "A"),
    Case("zero_", lambda fw, x: (x * 2.0).zero_(), "A"),
    Case("fill_", lambda fw, x, y: (x * 1.0).fill_(1.5) * y + x, "A B"),
    Case("pow_-2", lambda fw, x: (x * 1.0).pow_(2), "A"),
    Case("pow_-1.5", lambda fw, p, q: (p * 1.0).pow_(1.5) * q, "P Q"),
    Case("abs_", lambda fw, x: (x * 1.0).abs_() * x, "A"),
    Case("neg_", lambda fw, x: (x * 1.0).neg_(), "A"),
    Case("reciprocal_", lambda fw, p: (p * 1.0).reciprocal_(), "P"),
    Case("floor_", lambda fw, x: (x * 3.0).floor_() + x, "A"),
    Case("ceil_", lambda fw, x: (x * 3.0).ceil_() * x, "A"),
    Case("round_", lambda fw, x: (x * 3.0).round_() + x * x, "A"),
    Case("square_", lambda fw, x: (x * 1.0).square_(), "A"),
    Case("copy_", lambda fw, x, y: (x * 1.0).copy_(y) * x, "A B"),
    # augmented assignment (values and gradients; that it writes in place is tested below)
    Case("+=", _iadd, "A R4"),
    Case("*=-scalar", _imul_scalar, "A"),
    Case("*=-tensor", _imul_tensor, "A B"),
    Case("-=", _isub, "A B"),
    Case("/=-scalar", _idiv_scalar, "A"),
    # __setitem__
    Case("setitem-mask-tensor", _set_mask_tensor, "A M"),
    Case("setitem-slice-both-need-grad", _set_slice, "A V24"),
    Case("setitem-column", _set_column, "A C3"),
    Case("setitem-index-tensor", _set_index_tensor, "A V24"),
    Case("setitem-row-scalar", _set_row_scalar, "A"),
    Case("setitem-broadcast-row", _set_broadcast, "A R4"),
    Case("setitem-broadcast-[1]", _set_broadcast_one, "A S1"),
    Case("setitem-mask-zero", _set_mask_zero, "A"),
    Case("setitem-row-then-square", _set_row_then_square, "A R4"),
    Case("setitem-const-value", _set_const_value, "A"),
    # the destination needs no gradient, the value does
    Case("setitem-into-const", _set_into_const, "V24"),
    Case("mul_-into-const", _mul_into_const, "B"),
    Case("copy_-into-const", _copy_into_const, "B"),
    Case("view-of-const-add_", _view_of_const, "R4"),
    # writes through views
    Case("view-slice-mul_-scalar", _view_slice, "A"),
    Case("view-slice-mul_-tensor", _view_slice_tensor, "A V24"),
    Case("view-row-exp_", _view_row_exp, "A"),
    Case("view-column-mul_", _view_column, "A C3"),
    Case("view-reshape-mul_", _view_reshape, "A W43"),
    Case("view-reshape-flat-slice-zero_", _view_reshape_flat, "A"),
    Case("view-T-mul_", _view_T, "A W43"),
    Case("view-t()-add_", _view_t, "A W43"),
    Case("view-transpose-mul_", _view_permute, "T234 T423"),
    Case("view-nested-slice-mul_", _view_nested, "A V24"),
    Case("base-write-view-read", _base_write_view_read, "A B"),
    # chains
    Case("chain-mul_-add_-tanh_", lambda fw, x, y: (x * 1.0).mul_(y).add_(1.0).tanh_(), "A B"),
    Case("chain-mul_-add_-sqrt_", lambda fw, p, q: (p * 1.0).mul_(q).add_(1.0).sqrt_(), "P Q"),
    Case("chain-add_-mul_-subtract_", _chain_arith, "A B"),
    Case("chain-setitem-and-ops", _chain_setitem_and_ops, "A B R4 C3"),
    Case("chain-exp_-then-read", lambda fw, x: (x * 1.0).exp_() * 2.0, "A"),
    Case("chain-matmul-then-relu_", lambda fw, x, w: fw.F.relu_(x.matmul(w)) * 3.0, "A W44"),
    # in-place where torch does NOT raise: the modified tensor was not saved, or saved by nobody
    Case("noraise-input-saved-by-add", _saved_by_add, "A B"),
    Case("noraise-scalar-mul", _saved_by_scalar_mul, "A"),
    Case("noraise-mul-by-const", _saved_by_const_mul, "A"),
    Case("noraise-input-of-exp", _input_of_exp, "A"),
    Case("noraise-input-of-sigmoid", _input_of_sigmoid, "A"),
    Case("noraise-output-of-scalar-mul", lambda fw, x: (x * 2.0).mul_(3.0), "A"),
    Case("noraise-output-of-add-after-exp", _output_of_add_after_exp, "A"),
    Case("noraise-output-of-sin", lambda fw, x: x.sin().mul_(2.0), "A"),
    Case("noraise-input-of-sum", _sum_then_zero, "A"),
]

def _upstream(case_id, shape):
    return np.random.default_rng(zlib.crc32(case_id.encode())).standard_normal(tuple(shape))


def _run(case, fw, torch_side):
    leaves, out = case.run(fw, torch_side)
    up = _upstream(case.id, fw.numpy(out).shape)
    out.backward(fw.const(up))
    return fw.numpy(out), [fw.grad(t) for t in leaves]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_inplace_values_and_gradients_match_torch(case, torch):
    want_out, want_grads = _run(case, Theirs(torch), torch_side=True)
    got_out, got_grads = _run(case, Ours, torch_side=False)
    np.testing.assert_allclose(got_out, want_out, rtol=RTOL, atol=ATOL, err_msg=f"{case.id}: forward")
    for name, got, want in zip(case.inputs.split(), got_grads, want_grads):
        shape = ARR[name].shape
        got = np.zeros(shape) if got is None else got      # an unreached leaf: torch says None, zeros are fine
        want = np.zeros(shape) if want is None else want
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{case.id}: gradient of {name}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_inplace_forward_values_without_grad_match_torch(case, torch):
    """The same cases with inputs that need no gradient: the forward semantics alone (a failure here
    is not an autograd bug)."""
    theirs = Theirs(torch)
    fn_t = case.torch_fn or case.fn
    want = theirs.numpy(fn_t(theirs, *[theirs.const(ARR[k]) for k in case.inputs.split()]))
    got = case.fn(Ours, *[Ours.const(ARR[k]) for k in case.inputs.split()]).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_there_are_enough_cases():
    assert len(CASES) >= 45 and len({c.id for c in CASES}) == len(CASES)


# -- "modified by an inplace operation" ---------------------------------------------------------------------------

def _err_exp(fw, x):
    y = x.exp()
    y.mul_(2)
    return y


def _err_sigmoid(fw, x):
    y = x.sigmoid()
    y.mul_(2)
    return y


def _err_tanh(fw, x):
    y = x.tanh()
    z = y + 1.0
    y.add_(1)
    return z


def _err_multiply(fw, x, w):
    h = w * 1.0
    a = x * h
    h.add_(1)
    return a


def _err_sqrt(fw, p):
    y = p.sqrt()
    y.add_(1)
    return y


def _err_pow(fw, x):
    h = x * 1.0
    y = h.pow(2)
    h.add_(1)
    return y


def _err_matmul(fw, x, w):
    h = x * 1.0
    y = h.matmul(w)
    h.mul_(2)
    return y


def _err_relu(fw, x):
    y = fw.F.relu(x * 1.0)
    y.add_(1)
    return y


def _err_exp_inplace(fw, x):
    y = (x * 1.0).exp_()
    y.mul_(2)
    return y


def _err_setitem_saved(fw, x, w):
    h = x * 1.0
    y = h * w
    h[0] = 0.0
    return y


def _err_view_of_saved(fw, x):
    y = x.exp()
    v = y[0:2]
    v.mul_(2)
    return y


def _err_divide(fw, x, p):
    h = p * 1.0
    y = x / h
    h.add_(1)
    return y


def _err_inplace_on_saved_output(fw, x):
    y = (x * 1.0).tanh()
    y.sigmoid_()
    return y


def _err_mul_by_itself(fw, x):
    h = x * 1.0
    h.mul_(h)                  # mul_ saves `other`, which is h itself, then overwrites it
    return h


@dataclass(frozen=True)
class ErrCase:
    id: str
    fn: Callable
    inputs: str
    saver: str              # regex of the op (oarlock's name) whose saved tensor was modified: the message names it


ERROR_CASES = [
    ErrCase("exp-output-mul_", _err_exp, "A", "exp"),
    ErrCase("sigmoid-output-mul_", _err_sigmoid, "A", "sigmoid"),
    ErrCase("tanh-output-add_-used-later", _err_tanh, "A", "tanh"),
    ErrCase("multiply-input-add_", _err_multiply, "A B", "multiply"),
    ErrCase("sqrt-output-add_", _err_sqrt, "P", "sqrt"),
    ErrCase("pow-input-add_", _err_pow, "A", "pow"),
    ErrCase("matmul-input-mul_", _err_matmul, "A W44", "matmul"),
    ErrCase("relu-output-add_", _err_relu, "A", "relu"),
    ErrCase("exp_-output-mul_", _err_exp_inplace, "A", "exp"),
    ErrCase("multiply-input-setitem", _err_setitem_saved, "A B", "multiply"),
    ErrCase("exp-output-view-mul_", _err_view_of_saved, "A", "exp"),
    ErrCase("divide-input-add_", _err_divide, "A P", "divide"),
    ErrCase("tanh-output-sigmoid_", _err_inplace_on_saved_output, "A", "tanh"),
    ErrCase("mul_-by-itself", _err_mul_by_itself, "A", "mul|multiply"),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_backward_through_a_modified_saved_tensor_raises_like_torch(case, torch):
    theirs = Theirs(torch)
    out = case.fn(theirs, *[theirs.leaf(ARR[k]) for k in case.inputs.split()])   # the forward is fine
    with pytest.raises(RuntimeError, match=MODIFIED):
        out.backward(theirs.const(_upstream(case.id, out.shape)))

    out = case.fn(Ours, *[Ours.leaf(ARR[k]) for k in case.inputs.split()])
    with pytest.raises(RuntimeError, match=MODIFIED) as info:
        out.backward(Ours.const(_upstream(case.id, out.shape)))
    # the op's name as a word, or its in-place form ("exp" or "exp_"; "expected version" must not count)
    message = str(info.value)
    assert re.search(rf"\b(?:{case.saver})(?:_|\b)", message), f"the message should name {case.saver!r}: {message}"


# -- in-place on a leaf that requires grad -------------------------------------------------------------------------

def _leaf_setitem(fw, x):
    x[0] = 1.0


def _leaf_setitem_mask(fw, x):
    x[fw.const(MASK)] = 0.0


LEAF_OPS = {
    "mul_": lambda fw, x: x.mul_(2.0),
    "add_-tensor": lambda fw, x: x.add_(fw.const(ARR["B"])),
    "exp_": lambda fw, x: x.exp_(),
    "zero_": lambda fw, x: x.zero_(),
    "clip_": lambda fw, x: x.clip_(-0.5, 0.5),
    "copy_": lambda fw, x: x.copy_(fw.const(ARR["B"])),
    "F.relu_": lambda fw, x: fw.F.relu_(x),
    "setitem-row": _leaf_setitem,
    "setitem-mask": _leaf_setitem_mask,
    "view-of-leaf-mul_": lambda fw, x: x[0:2].mul_(2.0),
}


@pytest.mark.parametrize("op", list(LEAF_OPS), ids=str)
def test_inplace_on_a_leaf_that_requires_grad_raises(op, torch):
    theirs = Theirs(torch)
    xt = theirs.leaf(ARR["A"])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used in an in-place"):
        LEAF_OPS[op](theirs, xt)

    x = Ours.leaf(ARR["A"])
    with pytest.raises((RuntimeError, ValueError)) as info:
        LEAF_OPS[op](Ours, x)
    message = str(info.value).lower()
    assert "leaf" in message and ("in-place" in message or "inplace" in message or "in place" in message), message
    np.testing.assert_array_equal(x.numpy(), ARR["A"])              # nothing was written
    assert x.grad is None and not x.stop_gradient and Ours.version(x) == 0
    (x * 2.0).sum().backward()                                     # still a usable leaf
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2.0))


@pytest.mark.parametrize("op", list(LEAF_OPS), ids=str)
def test_inplace_on_a_leaf_under_no_grad_works_like_an_optimizer_step(op, torch):
    results = []
    for fw in (Theirs(torch), Ours):
        x = fw.leaf(ARR["A"])
        with fw.no_grad():
            LEAF_OPS[op](fw, x)
        assert fw.requires_grad(x) and x.grad_fn is None, "still a leaf that requires grad"
        version = fw.version(x)
        (x * x).sum().backward()                                   # the graph sees the new value
        results.append((fw.numpy(x), fw.grad(x), version))
    (want_x, want_g, want_v), (got_x, got_g, got_v) = results
    np.testing.assert_allclose(got_x, want_x, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_g, want_g, rtol=RTOL, atol=ATOL)
    assert got_v == want_v == 1


def test_inplace_on_a_tensor_that_needs_no_grad_is_allowed():
    x = Ours.const(ARR["A"])
    x.mul_(2.0)
    x[0] = 1.0
    assert x.stop_gradient and x.grad_fn is None
    expected = ARR["A"] * 2.0
    expected[0] = 1.0
    np.testing.assert_array_equal(x.numpy(), expected)


# -- the version counter -----------------------------------------------------------------------------------------

def _version_steps(fw):
    """Apply a sequence of in-place writes, yielding (label, tensor whose version to read) after each."""
    x = fw.const(ZEROS34)
    yield "new", x
    x.mul_(2.0)
    yield "mul_", x
    x[0] = 5.0
    yield "setitem-row-scalar", x
    x[1:3] = fw.const(np.ones((2, 4)))
    yield "setitem-slice", x
    x[:, 0] = fw.const(np.ones(3))
    yield "setitem-column", x
    x[fw.const(MASK)] = 0.0
    yield "setitem-mask", x
    x[fw.const(IDX)] = 1.0
    yield "setitem-index-tensor", x
    v = x[1:3]
    v.add_(1.0)
    yield "view-add_ (base)", x
    yield "view-add_ (view)", v
    r = x.reshape([12])
    r.zero_()
    yield "reshape-view-zero_ (base)", x
    yield "reshape-view-zero_ (view)", r
    yield "older view sees it too", v
    fw.permute(x, [1, 0]).fill_(1.0)
    yield "transpose-view-fill_", x
    x.copy_(fw.const(np.ones((3, 4))))
    yield "copy_", x
    yield "out-of-place result", x * 2.0
    yield "clone", x.clone()
    h = fw.leaf(ARR["A"]) * 1.0
    h.exp_()
    h[0] = 1.0
    yield "grad-tracked non-leaf after 2 writes", h


def test_version_counter_matches_torch(torch):
    want = [(label, Theirs.version(t)) for label, t in _version_steps(Theirs(torch))]
    assert [v for _, v in want] == [0, 1, 2, 3, 4, 5, 6, 7, 7, 8, 8, 8, 9, 10, 0, 0, 2]  # torch, checked
    got = [(label, Ours.version(t)) for label, t in _version_steps(Ours)]
    assert got == want


def test_version_counter_is_a_paddle_style_property():
    x = Ours.const(ARR["A"])
    assert isinstance(x.inplace_version, int) and x.inplace_version == 0 and x._version == 0
    x.add_(1.0)
    assert x.inplace_version == 1 and x._version == 1


# -- augmented assignment follows Paddle 3.2: no __iadd__, so `h += r` rebinds h to a new tensor -----------------
# (PyTorch writes in place instead; both give the same values and gradients, which the table checks)

AUGMENTED = ("+=", "-=", "*=", "/=")


def _augmented(op, x, y):
    h = x * 1.0
    alias = h
    if op == "+=":
        h += y
    elif op == "-=":
        h -= y
    elif op == "*=":
        h *= y
    else:
        h /= y
    return h, alias


@pytest.mark.parametrize("op", AUGMENTED, ids=str)
def test_augmented_assignment_rebinds_like_paddle(op, paddle, torch):
    """Checked against Paddle 3.2 itself: the alias keeps its value and version, h is a new tensor, and the
    gradients of h are torch's (whose += is in place) and Paddle's."""
    results = []
    for fw in (paddle, oarlock):
        x = fw.to_tensor(ARR["A"], stop_gradient=False)
        y = fw.to_tensor(ARR["P"], stop_gradient=False)
        h, alias = _augmented(op, x, y)
        assert h is not alias and alias.inplace_version == 0, f"{op} must not modify the tensor in place"
        np.testing.assert_allclose(alias.numpy(), ARR["A"], rtol=RTOL, atol=ATOL)
        (h * x).sum().backward()
        results.append((h.numpy(), x.grad.numpy(), y.grad.numpy()))
    theirs = Theirs(torch)
    x, y = theirs.leaf(ARR["A"]), theirs.leaf(ARR["P"])
    h, _ = _augmented(op, x, y)
    (h * x).sum().backward()
    results.append((theirs.numpy(h), theirs.grad(x), theirs.grad(y)))
    for want, got in zip(results[0], results[1]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)      # Paddle computes in float32 here
    for want, got in zip(results[2], results[1]):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", AUGMENTED, ids=str)
def test_augmented_assignment_on_a_leaf_is_allowed_like_paddle(op):
    x = Ours.leaf(ARR["A"])
    h, _ = _augmented(op, x, 2.0)
    assert h is not x and x.inplace_version == 0 and not h.stop_gradient
    np.testing.assert_array_equal(x.numpy(), ARR["A"])


# -- uniform_ (random values: checked for range; it has no gradient) ------------------------------------------------

def test_uniform_on_a_non_leaf_cuts_the_gradient_like_torch(torch):
    """uniform_ is an in-place write (version + 1) whose values carry no gradient."""
    grads = []
    for fw in (Theirs(torch), Ours):
        x = fw.leaf(ARR["A"])
        h = x * 2.0
        h.uniform_(0.25, 0.75)
        assert fw.version(h) == 1
        values = fw.numpy(h)
        assert values.shape == (3, 4) and values.min() >= 0.25 and values.max() <= 0.75
        (h * 3.0 + x).sum().backward()
        grads.append(fw.grad(x))
    np.testing.assert_allclose(grads[1], grads[0], rtol=RTOL, atol=ATOL)   # ones: uniform_ passes no gradient


# -- the API the cases use exists in Paddle 3.2 -----------------------------------------------------------------------

PADDLE_TENSOR_INPLACE_USED = ["add_", "subtract_", "mul_", "multiply_", "div_", "divide_", "scale_", "exp_", "sqrt_",
                              "rsqrt_", "tanh_", "sigmoid_", "clip_", "zero_", "fill_", "pow_", "abs_", "neg_",
                              "reciprocal_", "floor_", "ceil_", "round_", "square_", "copy_", "uniform_"]


def test_the_cases_use_only_paddle_32_inplace_apis(paddle):
    missing = [n for n in PADDLE_TENSOR_INPLACE_USED if not hasattr(paddle.Tensor, n)]
    assert not missing, missing
    assert hasattr(paddle.nn.functional, "relu_")
    for attr in ("inplace_version", "T", "t", "transpose", "reshape"):
        assert hasattr(paddle.Tensor, attr), attr


def test_ops_that_write_state_besides_their_target_guard_and_version_it():
    """An optimizer step writes its moments too (writes=): their write guards run before the kernel, and
    their version counters move on, as the parameter's do (plugin_api.guard_writes)."""
    from oarlock.plugin_api import guard_writes

    p, g, m1, m2 = (oarlock.ones([3]) for _ in range(4))
    seen = []
    guard_writes(m1, lambda t: seen.append(("m1", t.numpy().tolist())))
    guard_writes(m2, lambda t: seen.append(("m2", t.numpy().tolist())))
    with oarlock.no_grad():
        oarlock.adam_step_(p, g, m1, m2, None, 0.1, 0.9, 0.999, 1e-8, 1)
    assert seen == [("m1", [1.0] * 3), ("m2", [1.0] * 3)]   # called before the write, with the old values
    assert (p.inplace_version, m1.inplace_version, m2.inplace_version) == (1, 1, 1)
    params = [oarlock.ones([2]), oarlock.ones([4])]
    moments = [[oarlock.zeros([2]), oarlock.zeros([4])] for _ in range(2)]
    with oarlock.no_grad():
        oarlock.adam_steps_(params, [oarlock.ones([2]), oarlock.ones([4])], *moments, 0.1, 0.9, 0.999, 1e-8, 1)
    assert [t.inplace_version for t in params + moments[0] + moments[1]] == [1] * 6
