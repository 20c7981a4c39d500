"""oarlock.vision.ops: ConvNormActivation (the block Paddle's model zoo builds on) and non-maximum suppression.

ConvNormActivation follows Paddle 3.2: a Sequential of Conv2D, the norm layer and the activation, so its
state-dict keys are "0.weight", "1._mean", ... as in Paddle.
"""

from __future__ import annotations

import numbers

import numpy as np

import oarlock
import oarlock.nn as nn


class ConvNormActivation(nn.Sequential):
    """Conv2D, then norm_layer(out_channels) unless None, then activation_layer() unless None. padding None
    keeps the spatial size for odd kernels ((kernel_size - 1) // 2 * dilation); bias None means a bias
    only when there is no norm layer."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=None, groups=1,
                 norm_layer=nn.BatchNorm2D, activation_layer=nn.ReLU, dilation=1, bias=None):
        if padding is None:
            if not isinstance(kernel_size, numbers.Integral) or not isinstance(dilation, numbers.Integral):
                raise TypeError(f"ConvNormActivation: padding=None needs an int kernel_size and dilation, got "
                                f"kernel_size={kernel_size!r}, dilation={dilation!r}; give padding explicitly")
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [nn.Conv2D(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation,
                            groups=groups, bias_attr=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer())
        super().__init__(*layers)


def _iou(box, boxes):
    """IoU of one [x1, y1, x2, y2] box with each row of `boxes` (Paddle's nms counts areas without +1)."""
    lt = np.maximum(box[:2], boxes[:, :2])
    rb = np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return inter / np.maximum(area + areas - inter, np.finfo(np.float64).tiny)


def _nms_one(boxes, scores, iou_threshold):
    order = np.argsort(-scores, kind="stable") if scores is not None else np.arange(len(boxes))
    keep = []
    suppressed = np.zeros(len(boxes), bool)
    for i in order:
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= _iou(boxes[i], boxes) > iou_threshold
    return np.asarray(keep, dtype=np.int64)


def nms(boxes, iou_threshold=0.3, scores=None, category_idxs=None, categories=None, top_k=None):
    """Indices (int64) of the boxes kept by non-maximum suppression, in decreasing score order (input order
    without scores). With category_idxs and categories, boxes are suppressed only within their category and
    the kept ones of all categories are ordered by score; top_k keeps the first top_k."""
    if not isinstance(boxes, oarlock.Tensor) or len(boxes.shape) != 2 or boxes.shape[1] != 4:
        raise ValueError(f"nms: boxes must be a Tensor of shape [N, 4], got "
                         f"{list(boxes.shape) if isinstance(boxes, oarlock.Tensor) else type(boxes).__name__}")
    b = boxes.numpy().astype(np.float64)
    s = None if scores is None else scores.numpy().astype(np.float64)
    if category_idxs is None:
        keep = _nms_one(b, s, iou_threshold)
    else:
        if s is None or categories is None:
            raise ValueError("nms: category_idxs needs scores and categories")
        cats = category_idxs.numpy()
        kept = [np.flatnonzero(cats == c)[_nms_one(b[cats == c], s[cats == c], iou_threshold)]
                for c in categories]
        keep = np.concatenate(kept) if kept else np.zeros(0, np.int64)
        keep = keep[np.argsort(-s[keep], kind="stable")]
    if top_k is not None:
        keep = keep[:top_k]
    return oarlock.to_tensor(keep.astype(np.int64))
