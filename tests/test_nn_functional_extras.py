"""Paddle 3.2's pad, interpolate/upsample, normalize, cosine_similarity, pairwise_distance, one_hot,
label_smooth, sequence_mask, pixel/channel shuffles, bilinear and local_response_norm, and their layers,
against real Paddle: values and input gradients over every mode, layout and alignment Paddle has."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from paddle_compare import compare

RNG = np.random.default_rng(0)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _both(paddle, name, arrays, **kwargs):
    return compare(paddle, lambda *t: getattr(F, name)(*t, **kwargs),
                   lambda *t: getattr(paddle.nn.functional, name)(*t, **kwargs), arrays)


# -- pad ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", [((2, 3, 5), [1, 2]), ((2, 3, 4, 5), [1, 2, 0, 2]),
                                        ((1, 2, 3, 4, 5), [1, 0, 2, 1, 1, 1])])
@pytest.mark.parametrize("channel_last", [False, True])
def test_pad_modes(paddle, mode, shape, pads, channel_last):
    kwargs = {"mode": mode}
    if channel_last:
        kwargs["data_format"] = {3: "NLC", 4: "NHWC", 5: "NDHWC"}[len(shape)]
    _both(paddle, "pad", [_x(*shape)], pad=pads, **kwargs)


@pytest.mark.parametrize("shape,pads,kwargs", [
    ((2, 3), [1, 2, 3, 4], {"value": 2.5}),                          # every axis, from the first
    ((2, 3), [1, 2], {"value": 2.5}),                                # the last axis only
    ((2, 3, 4), [1, 2, 0, 1, 2, 0], {"value": 1.0, "pad_from_left_axis": False}),
    ((2, 3, 4), [1, 2, 0, 1], {}),
    ((2, 3, 4, 5), [-1, 2, 1, -1], {"value": 1.0}),                  # negative amounts crop
    ((4,), [1, 2], {"value": -1.0}),
])
def test_pad_constant_any_axes(paddle, shape, pads, kwargs):
    _both(paddle, "pad", [_x(*shape)], pad=pads, **kwargs)


def test_pad_errors_and_layers(paddle):
    x = _x(1, 2, 3, 4)
    with pytest.raises(ValueError, match="pad: reflect padding of an axis of size 4 must be smaller than it"):
        F.pad(oarlock.to_tensor(x), [4, 0, 0, 0], mode="reflect")
    with pytest.raises(ValueError, match="pad: mode must be one of"):
        F.pad(oarlock.to_tensor(x), [1, 1, 1, 1], mode="mirror")
    for ours, theirs, arr in (
            (nn.Pad2D(1, mode="reflect"), paddle.nn.Pad2D(1, mode="reflect"), x),
            (nn.Pad2D([1, 0, 2, 1], value=3.0), paddle.nn.Pad2D([1, 0, 2, 1], value=3.0), x),
            (nn.Pad1D([2, 1], mode="replicate"), paddle.nn.Pad1D([2, 1], mode="replicate"), x[0]),
            (nn.Pad3D(1, mode="circular"), paddle.nn.Pad3D(1, mode="circular"), x[None]),
            (nn.ZeroPad1D(2), paddle.nn.ZeroPad1D(2), x[0]),
            (nn.ZeroPad2D([1, 2, 3, 0]), paddle.nn.ZeroPad2D([1, 2, 3, 0]), x),
            (nn.ZeroPad3D(1), paddle.nn.ZeroPad3D(1), x[None])):
        compare(paddle, ours, theirs, [arr])
    _both(paddle, "zeropad2d", [x], padding=[1, 2, 0, 1])


# -- interpolate --------------------------------------------------------------------------------------

SHAPES = {"nearest": (1, 2, 5, 7), "linear": (2, 2, 5), "bilinear": (1, 2, 5, 7), "bicubic": (1, 2, 5, 7),
          "trilinear": (1, 1, 3, 4, 5)}


ALIGNMENTS = {"half_pixel": (False, 0), "asymmetric": (False, 1), "corners": (True, 0)}
# Paddle refuses align_corners for nearest (test_interpolate_errors checks that we do too)
MODE_ALIGNMENTS = [(mode, align) for mode in SHAPES for align in ALIGNMENTS if (mode, align) != ("nearest", "corners")]


@pytest.mark.parametrize("mode,align", MODE_ALIGNMENTS)
@pytest.mark.parametrize("target", ["up", "down", "mixed", "scale2", "scale0.5", "scale1.7"])
def test_interpolate_matches_paddle(paddle, mode, align, target):
    align_corners, align_mode = ALIGNMENTS[align]
    shape = SHAPES[mode]
    nd = len(shape) - 2
    kwargs = {"up": {"size": [8] * nd}, "down": {"size": [3] * nd}, "mixed": {"size": [4, 9, 1][:nd]},
              "scale2": {"scale_factor": 2}, "scale0.5": {"scale_factor": 0.5},
              "scale1.7": {"scale_factor": [1.7, 0.6, 2.5][:nd]}}[target]
    # float32 sums of 2 to 64 weighted taps in another order: a few ulp of the largest tap apart
    compare(paddle, lambda t: F.interpolate(t, mode=mode, align_corners=align_corners, align_mode=align_mode, **kwargs),
            lambda t: paddle.nn.functional.interpolate(t, mode=mode, align_corners=align_corners,
                                                       align_mode=align_mode, **kwargs), [_x(*shape)], atol=1e-5)


@pytest.mark.parametrize("shape,size", [((1, 2, 7, 9), [3, 4]), ((1, 2, 7, 9), [9, 11]), ((2, 3, 7), [3]),
                                        ((1, 1, 4, 5, 6), [2, 3, 4])])
def test_interpolate_area(paddle, shape, size):
    if len(shape) != 4 and not hasattr(F, f"adaptive_avg_pool{len(shape) - 2}d"):
        pytest.skip("adaptive average pooling of this rank is not there yet")
    _both(paddle, "interpolate", [_x(*shape)], size=size, mode="area")


def test_interpolate_channel_last_and_layers(paddle):
    x = _x(2, 5, 6, 3)
    _both(paddle, "interpolate", [x], size=[7, 4], mode="bilinear", data_format="NHWC")
    _both(paddle, "upsample", [x], scale_factor=2, mode="nearest", data_format="NHWC")
    _both(paddle, "interpolate", [_x(2, 6, 3)], size=[9], mode="linear", data_format="NWC")
    y = _x(1, 2, 4, 5)
    for ours, theirs in ((nn.Upsample(scale_factor=2, mode="bilinear"),
                          paddle.nn.Upsample(scale_factor=2, mode="bilinear")),
                         (nn.Upsample(size=[3, 7], mode="bicubic", align_corners=True),
                          paddle.nn.Upsample(size=[3, 7], mode="bicubic", align_corners=True)),
                         (nn.UpsamplingNearest2D(scale_factor=3), paddle.nn.UpsamplingNearest2D(scale_factor=3)),
                         (nn.UpsamplingBilinear2D(size=[6, 9]), paddle.nn.UpsamplingBilinear2D(size=[6, 9]))):
        compare(paddle, ours, theirs, [y])


def test_interpolate_errors():
    x = oarlock.ones([1, 2, 4, 4])
    with pytest.raises(ValueError, match="interpolate: give exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="interpolate: mode 'trilinear' takes a 5-D input, got shape"):
        F.interpolate(x, size=[2, 2], mode="trilinear")
    with pytest.raises(ValueError, match="interpolate: align_corners=True is not valid for mode 'nearest'"):
        F.interpolate(x, size=[2, 2], align_corners=True)
    with pytest.raises(ValueError, match="interpolate: size must be 2 positive ints"):
        F.interpolate(x, size=[2, 2, 2], mode="bilinear")


# -- the rest -----------------------------------------------------------------------------------------

def test_normalize_and_distances(paddle):
    x, y = _x(3, 4, 5), _x(3, 4, 5)
    for kwargs in ({}, {"p": 1, "axis": -1}, {"p": 3.5, "axis": 0}):
        _both(paddle, "normalize", [x], **kwargs)
    _both(paddle, "cosine_similarity", [x, y])
    _both(paddle, "cosine_similarity", [x, y[:, :, :1]], axis=2)   # a broadcast size-1 axis
    for kwargs in ({}, {"p": 1.0, "keepdim": True}, {"p": float("inf")}, {"p": 3.0, "epsilon": 0.0}):
        _both(paddle, "pairwise_distance", [x, y], **kwargs)
    compare(paddle, nn.CosineSimilarity(axis=2, eps=1e-6), paddle.nn.CosineSimilarity(axis=2, eps=1e-6), [x, y])
    compare(paddle, nn.PairwiseDistance(p=1.5, keepdim=True), paddle.nn.PairwiseDistance(p=1.5, keepdim=True), [x, y])


def test_one_hot_label_smooth_sequence_mask(paddle):
    labels = np.array([[0, 2], [3, 1]], dtype=np.int64)
    for num_classes in (5, -1):
        ours = F.one_hot(oarlock.to_tensor(labels), num_classes)
        theirs = paddle.nn.functional.one_hot(paddle.to_tensor(labels), 5 if num_classes == -1 else num_classes)
        np.testing.assert_array_equal(ours.numpy()[..., :4], theirs.numpy()[..., :4])
        assert ours.dtype == oarlock.float32
    assert F.one_hot(oarlock.to_tensor(labels), -1).shape == [2, 2, 4]
    with pytest.raises(ValueError, match=r"one_hot: labels must be in \[0, 3\), got values from 0 to 3"):
        F.one_hot(oarlock.to_tensor(labels), 3)
    smooth = np.eye(4, dtype=np.float32)[[0, 2, 1]]
    _both(paddle, "label_smooth", [smooth])
    _both(paddle, "label_smooth", [smooth], epsilon=0.3)
    prior = np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)
    # a constant prior (Paddle's label_smooth gives no gradient for prior_dist; ours would be epsilon)
    compare(paddle, lambda t: F.label_smooth(t, oarlock.to_tensor(prior), epsilon=0.2),
            lambda t: paddle.nn.functional.label_smooth(t, paddle.to_tensor(prior), epsilon=0.2), [smooth])
    lengths = np.array([[1, 3], [0, 2]], dtype=np.int64)
    for args in ((), (5,), (4, "float32"), (None, "bool")):
        ours = F.sequence_mask(oarlock.to_tensor(lengths), *args)
        theirs = paddle.nn.functional.sequence_mask(paddle.to_tensor(lengths), *args)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert ours.numpy().dtype == theirs.numpy().dtype


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_shuffles(paddle, data_format):
    def layout(a):
        return a.transpose(0, 2, 3, 1).copy() if data_format == "NHWC" else a
    _both(paddle, "pixel_shuffle", [layout(_x(2, 8, 3, 4))], upscale_factor=2, data_format=data_format)
    _both(paddle, "pixel_unshuffle", [layout(_x(2, 3, 4, 6))], downscale_factor=2, data_format=data_format)
    _both(paddle, "channel_shuffle", [layout(_x(2, 6, 3, 2))], groups=3, data_format=data_format)
    compare(paddle, nn.PixelShuffle(3, data_format), paddle.nn.PixelShuffle(3, data_format), [layout(_x(1, 9, 2, 2))])
    compare(paddle, nn.PixelUnshuffle(2, data_format), paddle.nn.PixelUnshuffle(2, data_format),
            [layout(_x(1, 2, 4, 4))])
    compare(paddle, nn.ChannelShuffle(2, data_format), paddle.nn.ChannelShuffle(2, data_format),
            [layout(_x(1, 4, 2, 3))])
    with pytest.raises(ValueError, match="pixel_shuffle: the 6 channels must be divisible by upscale_factor"):
        F.pixel_shuffle(oarlock.ones([1, 6, 2, 2]), 2)


def test_bilinear(paddle):
    x1, x2 = _x(6, 3), _x(6, 4)
    _both(paddle, "bilinear", [x1, x2, _x(5, 3, 4), _x(1, 5)])
    _both(paddle, "bilinear", [x1, x2, _x(5, 3, 4)])
    theirs, ours = paddle.nn.Bilinear(3, 4, 5), nn.Bilinear(3, 4, 5)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    ours.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    compare(paddle, ours, theirs, [x1, x2])


@pytest.mark.parametrize("shape,kwargs", [((2, 8, 3, 4), {"size": 3}),
                                          ((2, 8, 3, 4), {"size": 4, "alpha": 0.1, "beta": 0.5, "k": 2.0}),
                                          ((3, 4, 5), {"size": 5, "data_format": "NLC"}),
                                          ((2, 5, 3, 2, 2), {"size": 2, "data_format": "NCDHW"}),
                                          ((2, 3, 2, 6), {"size": 3, "data_format": "NHWC"})])
def test_local_response_norm(paddle, shape, kwargs):
    x = _x(*shape)
    _both(paddle, "local_response_norm", [x], **kwargs)
    compare(paddle, nn.LocalResponseNorm(**kwargs), paddle.nn.LocalResponseNorm(**kwargs), [x])


def test_unflatten(paddle):
    x = _x(2, 12, 3)
    for axis, shape in ((1, [3, 4]), (1, [-1, 2]), (-1, [3, 1])):
        compare(paddle, nn.Unflatten(axis, shape), paddle.nn.Unflatten(axis, shape), [x])
    with pytest.raises(ValueError, match=r"Unflatten: shape \[5, 2\] does not multiply to the size 12"):
        nn.Unflatten(1, [5, 2])(oarlock.to_tensor(x))


# -- affine_grid / grid_sample ------------------------------------------------------------------------

@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("theta_shape,out_shape", [((2, 2, 3), [2, 3, 4, 5]), ((2, 3, 4), [2, 3, 2, 4, 5])])
def test_affine_grid(paddle, align_corners, theta_shape, out_shape):
    compare(paddle, lambda t: F.affine_grid(t, out_shape, align_corners),
            lambda t: paddle.nn.functional.affine_grid(t, out_shape, align_corners), [_x(*theta_shape)])
    with pytest.raises(ValueError, match="affine_grid: theta must be"):
        F.affine_grid(oarlock.ones([2, 2, 3]), [2, 3, 2, 4, 5])


def test_affine_grid_single_row_like_torch(torch):
    """An axis of size 1 samples position 0 (torch); Paddle 3.2 gives nan there with align_corners=True."""
    theta = _x(1, 2, 3)
    for align_corners in (True, False):
        ours = F.affine_grid(oarlock.to_tensor(theta), [1, 1, 1, 3], align_corners)
        theirs = torch.nn.functional.affine_grid(torch.tensor(theta), [1, 1, 1, 3], align_corners=align_corners)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [True, False])
def test_grid_sample(paddle, mode, padding_mode, align_corners):
    x = _x(2, 3, 5, 6)
    grid = RNG.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)   # some positions fall outside
    compare(paddle, lambda a, g: F.grid_sample(a, g, mode, padding_mode, align_corners),
            lambda a, g: paddle.nn.functional.grid_sample(a, g, mode, padding_mode, align_corners), [x, grid],
            atol=1e-5, constants=(1,) if mode == "nearest" else ())


@pytest.mark.parametrize("kwargs", [{"seg_num": 3}, {"seg_num": 2, "shift_ratio": 0.3},
                                    {"seg_num": 3, "data_format": "NHWC"}])
def test_temporal_shift(paddle, kwargs):
    _both(paddle, "temporal_shift", [_x(6, 8, 2, 3)], **kwargs)


def test_gather_tree(paddle):
    ids, parents = RNG.integers(0, 10, (5, 2, 3)), RNG.integers(0, 3, (5, 2, 3))
    ours = F.gather_tree(oarlock.to_tensor(ids), oarlock.to_tensor(parents))
    theirs = paddle.nn.functional.gather_tree(paddle.to_tensor(ids), paddle.to_tensor(parents))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(ValueError, match="gather_tree: ids and parents must have the same shape"):
        F.gather_tree(oarlock.to_tensor(ids), oarlock.to_tensor(parents[:4]))
