"""Global-norm gradient clipping when the gradients are spread over ranks (Paddle's HybridParallelClipGrad
and the sharded optimizers' clips).

The norm of one process's ClipGradByGlobalNorm is sqrt(sum of every gradient's squares). Across ranks each
piece of the model must be counted exactly once:

- a tensor-parallel slice (marks.is_distributed) is one piece per model-parallel rank: its squares are
  summed over the model-parallel group (`split_group`);
- a parameter replicated over that group has the same gradient on every member: counted locally only;
- pipeline stages and sharded optimizers hold different parameters (or different pieces of them) on each
  rank of their group: the total is summed over each group of `shard_groups`;
- a layer shared across pipeline stages (a tied embedding) has one copy per stage holding it, with the same
  summed gradient: only the first stage's copy counts (Paddle's `param.is_firstly_shared`), all are clipped.

Every rank calls the same all-reduces in the same order whatever it holds, so no rank waits alone.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock.nn import ClipGradByGlobalNorm

from oarlock_parallel import marks


def _sum_squares(grads):
    """Sum of squares of `grads` as a float32 1-element tensor (0 when there are none)."""
    if not grads:
        return oarlock.zeros([1], dtype="float32")
    norm = oarlock.global_norm(grads).astype("float32")
    return oarlock.reshape(norm * norm, [1])


def _reduced(value, group):
    if group is not None and group.nranks > 1:
        dist.all_reduce(value, group=group)
    return value


class HybridParallelClipGrad(ClipGradByGlobalNorm):
    """ClipGradByGlobalNorm over gradients spread over ranks (see the module docstring).

    clip: the ClipGradByGlobalNorm it replaces (its clip_norm, group_name and auto_skip_clip are kept);
    split_group: the group whose ranks hold different slices of the distributed parameters (model parallel);
    shard_groups: groups whose ranks hold different parameters or pieces (pipeline, sharding)."""

    def __init__(self, clip, split_group=None, shard_groups=()):
        if not isinstance(clip, ClipGradByGlobalNorm):
            raise TypeError(f"HybridParallelClipGrad(): clip must be a ClipGradByGlobalNorm, got "
                            f"{type(clip).__name__}")
        super().__init__(clip.clip_norm, group_name=clip.group_name, auto_skip_clip=clip.auto_skip_clip)
        self._clip_inner = clip
        self.split_group = split_group
        self.shard_groups = tuple(g for g in shard_groups if g is not None)

    def __call__(self, params_grads):
        # called on every rank even with nothing to clip: the all-reduces must match across ranks
        chosen = [(p, g) for p, g in params_grads
                  if g is not None and (p.param_attrs is None or p.param_attrs.need_clip)]
        with oarlock.no_grad():
            self._clip([g for _, g in chosen], [marks.is_distributed(p) for p, _ in chosen],
                       [getattr(p, "is_firstly_shared", True) for p, _ in chosen])
        return params_grads

    def global_norm(self, grads, distributed) -> oarlock.Tensor:
        """The norm of the whole model's gradients, a 0-d float32 tensor equal on every rank."""
        split = _reduced(_sum_squares([g for g, d in zip(grads, distributed) if d]), self.split_group)
        total = split + _sum_squares([g for g, d in zip(grads, distributed) if not d])
        for group in self.shard_groups:
            total = _reduced(total, group)
        return oarlock.sqrt(oarlock.reshape(total, []))

    def _clip(self, grads, distributed=None, counted=None):
        if distributed is None:
            distributed = [False] * len(grads)
        if counted is None:
            counted = [True] * len(grads)
        kept = [i for i, c in enumerate(counted) if c]
        norm = self.global_norm([grads[i] for i in kept], [distributed[i] for i in kept])
        if self.auto_skip_clip and float(norm) <= self.clip_norm:
            return
        if grads:
            factor = self.clip_norm / oarlock.clip(norm, min=self.clip_norm)
            oarlock.scale_tensors_(grads, factor.astype(grads[0].dtype))

    def __str__(self):
        return f"Gradient Clip By GlobalNorm over ranks, global_norm={self.clip_norm:f}"


def wrap_clip(clip, split_group=None, shard_groups=()):
    """`clip` made rank-aware when it is a global-norm clip (other clips act per tensor: unchanged)."""
    if isinstance(clip, HybridParallelClipGrad):
        clip = clip._clip_inner
    if not isinstance(clip, ClipGradByGlobalNorm) or getattr(clip, "sums_expert_norms_over_moe_group", False):
        return clip   # ClipGradForMOEByGlobalNorm sums its own norms; wrapping it would drop the expert sum
    return HybridParallelClipGrad(clip, split_group=split_group, shard_groups=shard_groups)
