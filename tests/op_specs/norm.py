"""Specs for the norm family (oarlock_ops/norm.py): layer_norm, rms_norm, batch_norm, group_norm and their
fused backward _normalize_grad, embedding and its scatter-add gradient _embedding_grad, and the random
dropout ops (checked by seeding, statistics and their gradient). Comparisons with torch and paddle
live in tests/test_layers_common.py."""

import numpy as np
import pytest

import oarlock.nn.functional as F
from op_specs.base import FLOATS, Case, In, OpSpec, library_op

POSITIVE = (0.5, 2.0)  # variances, inverse standard deviations


# -- references -------------------------------------------------------------------------------------------

def _moments(x, axes, center):
    mean = x.mean(axis=axes, keepdims=True) if center else 0.0
    return mean, ((x - mean) ** 2).mean(axis=axes, keepdims=True)


def layer_norm_ref(x, normalized_shape, weight=None, bias=None, epsilon=1e-05, eps=None):
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    epsilon = epsilon if eps is None else eps
    mean, var = _moments(x, tuple(range(x.ndim - len(shape), x.ndim)), True)
    y = (x - mean) / np.sqrt(var + epsilon)
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def rms_norm_ref(x, normalized_shape, weight=None, eps=None, epsilon=None):
    eps = epsilon if eps is None else eps
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    ms = (x ** 2).mean(axis=tuple(range(x.ndim - len(shape), x.ndim)), keepdims=True)
    y = x / np.sqrt(ms + (2.0 ** -52 if eps is None else eps))
    return y if weight is None else y * weight.reshape(shape)


def _channel_shape(x, data_format):
    """(channel axis, broadcast shape of a per-channel vector)."""
    axis = x.ndim - 1 if data_format[-1] == "C" and len(data_format) > 2 else 1
    return axis, [x.shape[axis] if i == axis else 1 for i in range(x.ndim)]


def batch_norm_ref(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.9,
                   epsilon=1e-05, data_format="NCHW", use_global_stats=None):
    axis, shape = _channel_shape(x, data_format)
    global_stats = (not training) if use_global_stats is None else use_global_stats
    if global_stats:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    else:
        mean, var = _moments(x, tuple(i for i in range(x.ndim) if i != axis), True)
    y = (x - mean) / np.sqrt(var + epsilon)
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def group_norm_ref(x, num_groups, epsilon=1e-05, weight=None, bias=None, data_format="NCHW"):
    axis, shape = _channel_shape(x, data_format)
    xc = np.moveaxis(x, axis, 1)  # [N, C, *]
    grouped = xc.reshape(xc.shape[0], num_groups, xc.size // max(xc.shape[0] * num_groups, 1))
    mean, var = _moments(grouped, (2,), True)
    y = np.moveaxis(((grouped - mean) / np.sqrt(var + epsilon)).reshape(xc.shape), 1, axis)
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def normalize_grad_ref(x, weight, g, mean, rstd, view, stats, affine, fixed=False, bias=True):
    xv, gv = x.reshape(view), g.reshape(view)
    xhat = (xv - (0.0 if mean is None else mean)) * rstd
    gh = gv if weight is None else gv * weight.reshape(affine)
    if fixed:
        dx = gh * rstd
    else:
        dx = gh - xhat * (gh * xhat).mean(axis=tuple(stats), keepdims=True)
        if mean is not None:
            dx = dx - gh.mean(axis=tuple(stats), keepdims=True)
        dx = dx * rstd
    reduce = tuple(i for i, n in enumerate(affine) if n == 1)
    return (dx.reshape(x.shape), (gv * xhat).sum(axis=reduce).reshape(-1),
            gv.sum(axis=reduce).reshape(-1) if bias else np.zeros(0))


def embedding_ref(x, weight, padding_idx=None, sparse=False, max_norm=None, norm_type=2.0,
                  scale_grad_by_freq=False):
    weight = weight.copy()
    if max_norm is not None:
        rows = np.unique(x)
        norms = (np.abs(weight[rows]) ** norm_type).sum(axis=1, keepdims=True) ** (1 / norm_type)
        weight[rows] *= np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    out = weight[x]
    if padding_idx is not None:
        out[x == padding_idx % weight.shape[0]] = 0
    return out


def embedding_grad_ref(x, g, num_embeddings, padding_idx=None, scale_grad_by_freq=False):
    out = np.zeros((num_embeddings, g.shape[-1]))
    np.add.at(out, x.reshape(-1), g.reshape(-1, g.shape[-1]))
    if scale_grad_by_freq:
        out /= np.maximum(np.bincount(x.reshape(-1), minlength=num_embeddings), 1)[:, None]
    if padding_idx is not None:
        out[padding_idx % num_embeddings] = 0
    return out


# -- cases ---------------------------------------------------------------------------------------------------

def _vec(n, **kw):
    return In((n,), **kw)


LAYER_NORM_CASES = [
    Case([In((3, 5)), 5, _vec(5), _vec(5)], name="affine"),
    Case([In((2, 3, 4)), [3, 4], _vec(12), _vec(12)], name="two_dims_flat_weight"),
    Case([In((2, 3, 4)), [3, 4], In((3, 4)), In((3, 4))], name="two_dims_torch_weight"),
    Case([In((4, 6))], {"normalized_shape": [6]}, name="plain"),
    Case([In((4, 6)), 6, _vec(6)], {"eps": 1e-3}, name="weight_only_eps_alias"),
    Case([In((2, 1)), 1, _vec(1), _vec(1)], name="one_element"),
    Case([In((0, 4)), 4, _vec(4), _vec(4)], name="empty", grad=False),
]

RMS_NORM_CASES = [
    Case([In((3, 5)), 5, _vec(5)], name="weight"),
    Case([In((2, 3, 4)), [3, 4], _vec(12)], {"eps": 1e-5}, name="two_dims"),
    Case([In((4, 6)), [6]], {"epsilon": 1e-3}, name="plain_epsilon_alias"),
    Case([In((0, 4)), 4, _vec(4)], name="empty", grad=False),
]


def _running(c):
    return [_vec(c, grad=False), _vec(c, domain=POSITIVE, grad=False)]


BATCH_NORM_CASES = [
    Case([In((4, 3, 5)), *_running(3), _vec(3), _vec(3)], {"training": True}, name="train_ncl"),
    Case([In((6, 3)), *_running(3), _vec(3), _vec(3)], {"training": True, "momentum": 0.5}, name="train_nc"),
    Case([In((2, 3, 2, 2)), *_running(3)], {"training": True, "epsilon": 1e-3}, name="train_plain"),
    Case([In((2, 2, 3, 4)), *_running(4), _vec(4), _vec(4)], {"training": True, "data_format": "NHWC"},
         name="train_nhwc"),
    Case([In((4, 3, 5)), *_running(3), _vec(3), _vec(3)], name="eval"),
    Case([In((4, 3, 5)), *_running(3), _vec(3), _vec(3)], {"training": True, "use_global_stats": True},
         name="global_in_training"),
    Case([In((4, 3, 5)), *_running(3), _vec(3)], {"use_global_stats": False}, name="batch_stats_in_eval"),
    Case([In((0, 3)), *_running(3), _vec(3), _vec(3)], name="empty_eval", grad=False),
]

GROUP_NORM_CASES = [
    Case([In((2, 4, 3)), 2, 1e-5, _vec(4), _vec(4)], name="ncl"),
    Case([In((2, 6, 2, 2)), 3, 1e-5, _vec(6), _vec(6)], name="nchw"),
    Case([In((2, 2, 2, 6)), 3, 1e-5, _vec(6), _vec(6), "NHWC"], name="nhwc"),
    Case([In((3, 4, 2)), 1], name="one_group_plain"),
    Case([In((3, 4, 2)), 4], {"epsilon": 1e-3}, name="instance"),
    Case([In((3, 4)), 2, 1e-5, _vec(4)], name="2d_weight_only"),
    Case([In((0, 4, 2)), 2, 1e-5, _vec(4), _vec(4)], name="empty", grad=False),
]


def _stats(*shape):
    return In(shape, domain=POSITIVE)


NORMALIZE_GRAD_CASES = [
    Case([In((3, 5)), _vec(5), In((3, 5)), In((3, 1)), _stats(3, 1), (3, 5), (1,), (1, 5)], name="layer"),
    Case([In((3, 5)), None, In((3, 5)), In((3, 1)), _stats(3, 1), (3, 5), (1,), (1, 5)], name="no_weight"),
    Case([In((3, 5)), _vec(5), In((3, 5)), None, _stats(3, 1), (3, 5), (1,), (1, 5)], {"bias": False},
         name="rms"),
    Case([In((4, 3, 5)), _vec(3), In((4, 3, 5)), In((1, 3, 1)), _stats(1, 3, 1), (4, 3, 5), (0, 2), (1, 3, 1)],
         name="batch"),
    Case([In((4, 3, 5)), _vec(3), In((4, 3, 5)), In((1, 3, 1)), _stats(1, 3, 1), (4, 3, 5), (0, 2), (1, 3, 1)],
         {"fixed": True}, name="batch_fixed"),
    Case([In((2, 6, 4)), _vec(6), In((2, 6, 4)), In((2, 3, 1, 1)), _stats(2, 3, 1, 1), (2, 3, 2, 4), (2, 3),
          (1, 3, 2, 1)], name="group"),
    Case([In((0, 5)), _vec(5), In((0, 5)), In((0, 1)), _stats(0, 1), (0, 5), (1,), (1, 5)], name="empty"),
]


def ids(shape, n):
    return In(shape, dtype="int64", int_range=(0, n), grad=False)


def fixed_ids(values):
    return In(np.shape(values), dtype="int64", values=values, grad=False)


EMBEDDING_CASES = [
    Case([ids((2, 3), 5), In((5, 4))], name="lookup"),
    Case([fixed_ids([[0, 2, 2], [1, 2, 4]]), In((5, 4))], {"padding_idx": 2}, name="padding"),
    Case([fixed_ids([0, 4, 3, 4]), In((5, 3))], {"padding_idx": -1}, name="negative_padding"),
    Case([fixed_ids(3), In((5, 3))], name="0d_id"),
    Case([ids((0,), 5), In((5, 3))], name="empty"),
    Case([fixed_ids([0, 1, 1, 3]), In((4, 3))], {"scale_grad_by_freq": True}, name="by_freq",
         grad=False),  # the weight gradient is rescaled on purpose: not the derivative of the output
    Case([fixed_ids([0, 1, 1]), In((4, 3), domain=(-3.0, 3.0))], {"max_norm": 1.0}, name="max_norm", grad=False),
]

EMBEDDING_GRAD_CASES = [
    Case([fixed_ids([[0, 2, 2], [1, 2, 4]]), In((2, 3, 4)), 5], name="repeats"),
    Case([fixed_ids([[0, 2, 2], [1, 2, 4]]), In((2, 3, 4)), 6, 2], name="padding"),
    # its rule does not rescale (torch's double backward: through embedding, whose rule already
    # rescales, the second derivative comes out right; test_layers_common checks that)
    Case([fixed_ids([0, 1, 1, 3, 1]), In((5, 2)), 4], {"scale_grad_by_freq": True}, name="by_freq", grad=False),
    Case([ids((0,), 3), In((0, 2)), 3], name="empty"),
]


# -- dropout: random, so checked by seeding, statistics and the gradient -------------------------------------------

def _raises(fn, *words):
    with pytest.raises((TypeError, ValueError, NotImplementedError)) as info:
        fn()
    for word in words:
        assert word in str(info.value), f"error should mention {word!r}: {info.value}"


def _mask_of(paddle, fn, x):
    """The mask fn applied to x (ones): its output, and the gradient it sends back."""
    x = x.detach()
    x.stop_gradient = False
    y = fn(x)
    y.backward(paddle.ones_like(y))
    return y.numpy(), x.grad.numpy()


def _check_random(paddle, fn, shape, p):
    x = paddle.ones(shape)
    paddle.seed(11)
    first = fn(x).numpy()
    paddle.seed(11)
    assert np.array_equal(first, fn(x).numpy()), "the mask must be reproducible under oarlock.seed"
    assert not np.array_equal(first, fn(x).numpy()), "consecutive masks should differ"
    assert set(np.unique(first)) <= {0.0, np.float32(1 / (1 - p))}, set(np.unique(first))
    out, grad = _mask_of(paddle, fn, paddle.randn(shape))
    keep = out != 0
    assert np.allclose(grad[keep], 1 / (1 - p)) and (grad[~keep] == 0).all(), "the gradient is the mask"
    for dt in ("float64", "bfloat16"):
        assert fn(paddle.ones(shape, dtype=dt)).dtype == dt
    return first


def _check_dropout(paddle):
    out = _check_random(paddle, lambda x: F.dropout(x, 0.3), [100, 60], 0.3)
    assert abs((out == 0).mean() - 0.3) < 0.03
    x = paddle.randn([4, 5, 6])
    assert (F.dropout(x, 0.3, training=False).numpy() == x.numpy()).all()
    assert np.allclose(F.dropout(x, 0.3, training=False, mode="downscale_in_infer").numpy(), 0.7 * x.numpy())
    kept = F.dropout(paddle.ones([50, 50]), 0.5, mode="downscale_in_infer").numpy()
    assert set(np.unique(kept)) == {0.0, 1.0}
    assert (F.dropout(x, 0.0).numpy() == x.numpy()).all() and (F.dropout(x, 1.0).numpy() == 0).all()
    shared = F.dropout(paddle.ones([8, 5, 6]), 0.5, axis=1).numpy()
    assert (shared == shared[:1, :, :1]).all(), "axis=1: each index along axis 1 shares one draw"
    pairs = F.dropout(paddle.ones([8, 5, 6]), 0.5, axis=[0, 2]).numpy()
    assert (pairs == pairs[:, :1, :]).all()
    assert F.dropout(input=x, p=0.5).shape == x.shape
    _, grad = _mask_of(paddle, lambda t: F.dropout(t, 0.3, training=False, mode="downscale_in_infer"), x)
    assert np.allclose(grad, 0.7)
    _raises(lambda: F.dropout(x, 1.5), "dropout", "1.5")
    _raises(lambda: F.dropout(x, 0.5, mode="scale"), "dropout", "mode")
    _raises(lambda: F.dropout(x, 0.5, axis=3), "dropout", "axis")
    _raises(lambda: F.dropout(paddle.ones([3], dtype="int64"), 0.5), "dropout", "int64")


def _channel_check(name, shape, channel_axis, other_format, other_shape, other_axis):
    def check(paddle):
        fn = getattr(F, name)
        out = _check_random(paddle, lambda x: fn(x, 0.5), shape, 0.5)
        for y, axis in ((out, channel_axis), (fn(paddle.ones(other_shape), 0.5, data_format=other_format).numpy(),
                                             other_axis)):
            per_channel = np.moveaxis(y, axis, 1).reshape(y.shape[0], y.shape[axis], -1)
            assert (per_channel == per_channel[:, :, :1]).all(), f"{name}: a channel is dropped as a whole"
        x = paddle.randn(shape)
        assert (fn(x, 0.5, training=False).numpy() == x.numpy()).all()
        _raises(lambda: fn(paddle.ones([2] * (len(shape) + 1)), 0.5), name, "shape")
        _raises(lambda: fn(x, 0.5, data_format="NCW"), name, "data_format")
        _raises(lambda: fn(x, -0.1), name, "-0.1")
    return check


def _check_dropout1d_unbatched(paddle):
    y = F.dropout1d(paddle.ones([6, 40]), 0.5).numpy()
    assert (y == y[:, :1]).all(), "dropout1d on [C, L]: each channel is dropped as a whole"
    _channel_check("dropout1d", [4, 6, 10], 1, "NLC", [4, 10, 6], 2)(paddle)


SPECS = [
    OpSpec("layer_norm", LAYER_NORM_CASES, ref=layer_norm_ref, call=F.layer_norm),
    OpSpec("rms_norm", RMS_NORM_CASES, ref=rms_norm_ref, call=F.rms_norm),
    OpSpec("batch_norm", BATCH_NORM_CASES, ref=batch_norm_ref, call=F.batch_norm),
    OpSpec("group_norm", GROUP_NORM_CASES, ref=group_norm_ref, call=F.group_norm),
    OpSpec("_normalize_grad", NORMALIZE_GRAD_CASES, ref=normalize_grad_ref, call=library_op("_normalize_grad"),
           grad=False),
    OpSpec("embedding", EMBEDDING_CASES, ref=embedding_ref, call=F.embedding),
    OpSpec("_embedding_grad", EMBEDDING_GRAD_CASES, ref=embedding_grad_ref, call=library_op("_embedding_grad")),
    OpSpec("dropout", [], dtypes=FLOATS, check=_check_dropout),
    OpSpec("dropout1d", [], dtypes=FLOATS, check=_check_dropout1d_unbatched),
    OpSpec("dropout2d", [], dtypes=FLOATS, check=_channel_check("dropout2d", [4, 6, 3, 3], 1, "NHWC", [4, 3, 3, 6], 3)),
    OpSpec("dropout3d", [], dtypes=FLOATS,
           check=_channel_check("dropout3d", [3, 5, 2, 2, 2], 1, "NDHWC", [3, 2, 2, 2, 5], 4)),
]
