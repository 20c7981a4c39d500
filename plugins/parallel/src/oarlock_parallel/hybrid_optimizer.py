"""HybridParallelOptimizer (Paddle's fleet/meta_optimizers/dygraph_optimizer/hybrid_parallel_optimizer.py):
what fleet.distributed_optimizer returns on more than one rank.

It makes the inner optimizer's step right under hybrid parallelism:
- global-norm clipping counts every piece of the model once: a ClipGradByGlobalNorm of the innermost
  optimizer (its `_grad_clip` and every parameter group's "grad_clip") becomes a HybridParallelClipGrad
  that sums the squares of the tensor-parallel slices over the model-parallel group and the total over
  the pipeline group and, with sharding (whose optimizer gives each rank the gradients it owns), the
  sharding group. In pure data parallelism the clip is left alone, as in Paddle: the averaged gradients
  are the same on every rank;
- before the inner step, a sharded inner optimizer (one with `reduce_gradients`, the
  DygraphShardingOptimizer) reduces the gradients to their owners; then, when the model is not wrapped
  in DataParallel (the parallel mode is not pure data parallelism) and dp > 1, the gradients (those the
  sharded optimizer keeps, `filter_parameters`) are averaged over the data-parallel group.

Everything else (clear_grad, state_dict, set_state_dict, get_lr, _learning_rate, ...) is the inner
optimizer's, through __getattr__ as in Paddle.

Paddle's mp_configs.sync_param / sync_grad / sync_moment (broadcasting replicated parameters picked by
name substrings such as ".b_" over the model-parallel group after each step) are not done: oarlock's
parameters have no such generated names, and the replicated parameters of the tensor-parallel layers get
bit-identical gradients on every model-parallel rank, so they do not drift apart.
"""

from __future__ import annotations

import oarlock
from oarlock.optimizer import Optimizer

from oarlock.nn import ClipGradByGlobalNorm

from oarlock_parallel import clip as rank_aware_clip
from oarlock_parallel.dp_utils import fused_allreduce_gradients
from oarlock_parallel.topology import ParallelMode

_WHAT = "HybridParallelOptimizer()"

__all__ = ["HybridParallelOptimizer", "HybridParallelClipGrad", "innermost", "parameters_of"]


def innermost(optimizer):
    """The oarlock.optimizer.Optimizer under any wrappers that keep theirs in `_inner_opt`."""
    seen = optimizer
    while not isinstance(seen, Optimizer) and hasattr(seen, "_inner_opt"):
        seen = seen._inner_opt
    return seen


def parameters_of(optimizer) -> list:
    """Every parameter of the optimizer's groups (Paddle's obtain_optimizer_parameters_list)."""
    groups = getattr(optimizer, "_param_groups", None)
    if groups is None:
        groups = innermost(optimizer)._param_groups
    return [p for group in groups for p in group["params"]]


class HybridParallelClipGrad(rank_aware_clip.HybridParallelClipGrad):
    """Paddle's HybridParallelClipGrad(clip, hcg, split_norm_comm=False, timers=None): the global-norm clip
    `clip` with the tensor-parallel slices summed over hcg's model-parallel group and the total over its
    pipeline group and, when sharding_degree > 1, its sharding group (oarlock_parallel.clip).
    split_norm_comm and timers (Paddle's communication split and profiling) change nothing here."""

    def __init__(self, clip, hcg, split_norm_comm=False, timers=None):
        if isinstance(clip, rank_aware_clip.HybridParallelClipGrad):
            clip = clip._clip_inner
        if not hasattr(hcg, "get_model_parallel_group"):
            raise TypeError(f"HybridParallelClipGrad(): hcg must be a HybridCommunicateGroup, got {type(hcg).__name__}")
        shard_groups = [hcg.get_pipe_parallel_group()]
        if hcg.get_sharding_parallel_world_size() > 1:
            shard_groups.append(hcg.get_sharding_parallel_group())
        super().__init__(clip, split_group=hcg.get_model_parallel_group(), shard_groups=shard_groups)


class HybridParallelOptimizer:
    """Wrap `optimizer` (an oarlock optimizer, or a DygraphShardingOptimizer around one) for the hybrid
    group `hcg` and the fleet.DistributedStrategy `strategy`."""

    def __init__(self, optimizer, hcg, strategy):
        base = innermost(optimizer)
        if not isinstance(base, Optimizer):
            raise TypeError(f"{_WHAT}: optimizer must be an oarlock.optimizer.Optimizer (or a wrapper of one with "
                            f"_inner_opt), got {type(optimizer).__name__}")
        if not hasattr(hcg, "get_model_parallel_group"):
            raise TypeError(f"{_WHAT}: hcg must be a HybridCommunicateGroup (fleet.get_hybrid_communicate_group()), "
                            f"got {type(hcg).__name__}")
        self._inner_opt, self._hcg, self._strategy = optimizer, hcg, strategy
        self._use_dp_mode = hcg.get_parallel_mode() == ParallelMode.DATA_PARALLEL
        self._need_dp = hcg.get_data_parallel_world_size() > 1
        # in pure data parallelism DataParallel has averaged the gradients during backward
        self._dp_enable = self._need_dp and not self._use_dp_mode
        self._sharding_enable = hasattr(optimizer, "reduce_gradients")
        if not self._use_dp_mode:
            self._replace_clips(base)
        self.processed_steps = 0

    def _replace_clips(self, base):
        def rank_aware(clip):   # other clips act per tensor: the same on every rank
            return HybridParallelClipGrad(clip, self._hcg) if isinstance(clip, ClipGradByGlobalNorm) else clip

        base._grad_clip = rank_aware(base._grad_clip)
        if "grad_clip" in base._defaults:      # groups added later get the rank-aware clip too
            base._defaults["grad_clip"] = rank_aware(base._defaults["grad_clip"])
        for group in base._param_groups:
            group["grad_clip"] = rank_aware(group["grad_clip"])

    @property
    def inner_opt(self):
        return self._inner_opt

    def _hybrid_sync_grad(self, parameters: list):
        dp_parameters = parameters
        if self._sharding_enable:
            self._inner_opt.reduce_gradients(parameters, self._hcg)
            if hasattr(self._inner_opt, "filter_parameters"):
                dp_parameters = self._inner_opt.filter_parameters(parameters, self._hcg)
        if self._dp_enable:
            fused_allreduce_gradients(dp_parameters, self._hcg)

    def step(self):
        """Reduce the gradients over the groups that need it (see the module docstring), then step the
        inner optimizer (whose clip is rank-aware)."""
        with oarlock.no_grad():
            self._hybrid_sync_grad(parameters_of(self._inner_opt))
        self._inner_opt.step()
        self.processed_steps += 1

    def minimize(self, loss=None, startup_program=None, parameters=None, no_grad_set=None):
        """Paddle's minimize: the gradients of `parameters` (default: the optimizer's) reduced as in step(),
        then the inner optimizer's minimize."""
        chosen = list(parameters) if parameters else parameters_of(self._inner_opt)
        with oarlock.no_grad():
            self._hybrid_sync_grad(chosen)
        return self._inner_opt.minimize(loss, startup_program, parameters, no_grad_set)

    def __getattr__(self, item):
        # only called for names not found on the wrapper: the inner optimizer's (Paddle's delegation)
        if item == "_inner_opt":
            raise AttributeError(item)
        return getattr(self._inner_opt, item)

    def __repr__(self):
        return f"HybridParallelOptimizer({self._inner_opt!r})"
