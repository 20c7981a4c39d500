"""Gradients of a model with expert parallelism: Paddle's ClipGradForMOEByGlobalNorm, and the gradient
synchronisation that makes the ranks' step equal to one process holding every expert.

ClipGradForMOEByGlobalNorm (paddle.incubate.distributed.models.moe.grad_clip): the global norm counts
every dense parameter once (each rank holds the same, synchronised, gradient) and every expert once (each
rank of the moe group holds different experts: their squared norms are summed over the group). Paddle
all-reduces the expert sum only on ranks that hold expert gradients; here every rank of a moe group of
more than one rank takes part (with 0 when it has none), so a rank whose experts got no tokens never
leaves the others waiting.

sync_moe_gradients: with the loss of each rank the mean over its own tokens, the model's loss is the
mean over the `dense_group` ranks (every rank training the model: ep x dp). A dense parameter's gradient
is averaged over dense_group. An expert sees the tokens of every rank of its moe group, so its gradient
already sums their contributions; it is summed over its replicas on the other data-parallel groups
(`expert_dp_group`, Paddle's experts all-reduced over their own dp replicas only) and divided by the
dense_group size, which is the gradient of the mean loss.
"""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock.nn import ClipGradByGlobalNorm

__all__ = ["ClipGradForMOEByGlobalNorm", "sync_moe_gradients"]


def _sum_squares(grads) -> oarlock.Tensor:
    """Sum of the squares of `grads` as a float32 [1] tensor (0 without any)."""
    if not grads:
        return oarlock.zeros([1], dtype="float32")
    norm = oarlock.global_norm(grads).astype("float32")
    return oarlock.reshape(norm * norm, [1])


def _clipped(p) -> bool:
    return p.param_attrs is None or p.param_attrs.need_clip


class ClipGradForMOEByGlobalNorm(ClipGradByGlobalNorm):
    """ClipGradByGlobalNorm whose norm sums the expert parameters' squares over `moe_group`
    (is_expert_param_func(param) -> True for an expert parameter; required when moe_group has more than
    one rank)."""

    # fleet's wrap_clip (clip.py) leaves a clip with this flag as it is: HybridParallelClipGrad would drop the sum
    sums_expert_norms_over_moe_group = True

    def __init__(self, clip_norm, is_expert_param_func=None, moe_group=None, group_name="default_moe_group"):
        super().__init__(clip_norm, group_name=group_name)
        if moe_group is not None and moe_group.nranks > 1 and is_expert_param_func is None:
            raise ValueError("ClipGradForMOEByGlobalNorm(): is_expert_param_func is required when moe_group has "
                             f"{moe_group.nranks} ranks (it tells the expert parameters, whose norms are summed "
                             "over the group)")
        if is_expert_param_func is not None and not callable(is_expert_param_func):
            raise TypeError(f"ClipGradForMOEByGlobalNorm(): is_expert_param_func must be callable, got "
                            f"{type(is_expert_param_func).__name__}")
        self.moe_group = moe_group
        self.is_expert_param_func = is_expert_param_func

    def _split(self) -> bool:
        return self.moe_group is not None and self.moe_group.nranks > 1

    def global_norm(self, params_grads) -> oarlock.Tensor:
        """The norm of every gradient of the model (0-d float32), equal on every rank of the moe group."""
        chosen = [(p, g) for p, g in params_grads if g is not None and _clipped(p)]
        expert = [self._split() and bool(self.is_expert_param_func(p)) for p, _ in chosen]
        total = _sum_squares([g for (_, g), e in zip(chosen, expert) if not e])
        if self._split():
            moe = _sum_squares([g for (_, g), e in zip(chosen, expert) if e])
            dist.all_reduce(moe, group=self.moe_group)
            total = total + moe
        return oarlock.sqrt(oarlock.reshape(total, []))

    def __call__(self, params_grads):
        with oarlock.no_grad():
            norm = self.global_norm(params_grads)
            grads = [g for p, g in params_grads if g is not None and _clipped(p)]
            if grads:
                factor = self.clip_norm / oarlock.clip(norm, min=self.clip_norm)
                oarlock.scale_tensors_(grads, factor.astype(grads[0].dtype))
        return params_grads

    def __str__(self):
        return f"Gradient Clip By GlobalNorm, global_norm={self.clip_norm:f}"


def _reduce(params, group, scale: float, world_when_none: bool) -> None:
    """Sum the gradients of `params` over `group` (None: the world, or nobody unless world_when_none),
    then scale. A parameter without a gradient on some ranks counts zeros there; one without a gradient
    on every rank keeps none, so the optimizer skips it as it would in one process."""
    if not params:
        return
    held = [p.grad is not None for p in params]
    flat = oarlock.concat([(p.grad if h else oarlock.zeros(p.shape, dtype=p.dtype)).reshape([-1])
                           for p, h in zip(params, held)] + [oarlock.to_tensor(held, dtype=params[0].dtype)])
    ranks = group.nranks if group is not None else (dist.get_world_size() if world_when_none else 1)
    if ranks > 1:
        dist.all_reduce(flat, group=group)
    held_somewhere = flat[-len(params):].numpy() > 0
    flat = flat[:-len(params)] * scale
    start = 0
    for p, somewhere in zip(params, held_somewhere):
        size = int(np.prod(p.shape))
        p.grad = flat[start:start + size].reshape(p.shape) if somewhere else None
        start += size


def sync_moe_gradients(parameters, is_expert_param_func, dense_group=None, expert_dp_group=None) -> None:
    """Make the gradients those of the mean loss over the ranks of `dense_group` (module docstring):
    dense parameters averaged over dense_group (None: the whole world), expert parameters summed over
    expert_dp_group (None: no other replica) and divided by dense_group's size."""
    if not callable(is_expert_param_func):
        raise TypeError(f"sync_moe_gradients(): is_expert_param_func must be callable, got "
                        f"{type(is_expert_param_func).__name__}")
    params = [p for p in parameters if not p.stop_gradient]
    ranks = dense_group.nranks if dense_group is not None else dist.get_world_size()
    with oarlock.no_grad():
        _reduce([p for p in params if not is_expert_param_func(p)], dense_group, 1.0 / ranks, True)
        _reduce([p for p in params if is_expert_param_func(p)], expert_dp_group, 1.0 / ranks, False)
