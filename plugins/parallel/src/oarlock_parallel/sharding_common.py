"""What the sharded optimizers (stage 1: DygraphShardingOptimizer, stage 2: GroupShardedOptimizerStage2) share:
checking their arguments, assigning parameters to owner ranks, handing the inner optimizer only what its rank
owns, stepping with the clips called on every rank, and broadcasting each updated parameter from its owner.

The inner optimizer is an ordinary oarlock optimizer over the whole model: its parameter groups stay whole
(so param_groups, learning rates and the like read and write as usual, the same on every rank), but whenever
it steps or loads state they are cut down to the owned parameters for that call (`owned_only`), so it
creates moments only for them: the ~1/N optimizer state is the point of sharding. Its state_dict() keys are
those of the unsharded optimizer (it names the parameters when it is built).
"""

from __future__ import annotations

import contextlib

import oarlock
import oarlock.distributed as dist
from oarlock.optimizer import Optimizer

from oarlock_parallel.clip import HybridParallelClipGrad, wrap_clip


def check_optimizer(optimizer, what: str) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{what}: optimizer must be an oarlock.optimizer.Optimizer (AdamW, SGD, ...), got "
                        f"{type(optimizer).__name__} {optimizer!r}")


def check_member(group, what: str, argument: str) -> None:
    """A process group (or None) that this rank belongs to."""
    if group is None:
        return
    if not (hasattr(group, "ranks") and hasattr(group, "nranks") and hasattr(group, "rank")):
        raise TypeError(f"{what}: {argument} must be a process group (oarlock.distributed.new_group) or None, got "
                        f"{type(group).__name__} {group!r}")
    if group.rank < 0:
        raise ValueError(f"{what}: {argument} has ranks {group.ranks}, which do not include this rank "
                         f"({dist.get_rank()}); every rank must pass a group it belongs to")


def parameters_of(optimizer) -> list:
    """Every parameter of the optimizer, group by group (the order every rank sees)."""
    return [p for group in optimizer._param_groups for p in group["params"]]


def partition(params: list, nranks: int, sort_by_size: bool) -> list:
    """The owner (rank in the sharding group) of each parameter: each goes to the rank with the fewest elements
    so far (the first such rank), as Paddle does. Stage 1 assigns the largest parameters first
    (FLAGS_sharding_sort_parameters, on by default); stage 2 in the given order, counting trainable ones only."""
    order = sorted(range(len(params)), key=lambda i: -params[i].size) if sort_by_size else range(len(params))
    sizes, owners = [0] * nranks, [0] * len(params)
    for i in order:
        rank = sizes.index(min(sizes))
        owners[i] = rank
        if sort_by_size or not params[i].stop_gradient:
            sizes[rank] += params[i].size
    return owners


@contextlib.contextmanager
def owned_only(optimizer, owned: set):
    """Within the block, each parameter group of `optimizer` holds only the parameters whose id is in `owned`."""
    groups = list(optimizer._param_groups)
    whole = [group["params"] for group in groups]
    for group in groups:
        group["params"] = [p for p in group["params"] if id(p) in owned]
    try:
        yield
    finally:
        for group, params in zip(groups, whole):
            group["params"] = params


def wrap_clips(optimizer, split_group, shard_groups) -> None:
    """Make the global-norm clips of `optimizer` (per group, and _grad_clip) count every rank's gradients."""
    optimizer._grad_clip = wrap_clip(optimizer._grad_clip, split_group, shard_groups)
    for group in optimizer._param_groups:
        group["grad_clip"] = wrap_clip(group["grad_clip"], split_group, shard_groups)


@contextlib.contextmanager
def _clips_off(optimizer):
    saved = [group["grad_clip"] for group in optimizer._param_groups]
    for group in optimizer._param_groups:
        group["grad_clip"] = None
    try:
        yield
    finally:
        for group, clip in zip(optimizer._param_groups, saved):
            group["grad_clip"] = clip


def step_owned(optimizer, owned: set) -> None:
    """Clip, then update the owned parameters. The optimizer skips a group without gradients, clip included,
    but a rank-aware clip all-reduces: so the clips are called here, for every group on every rank in the
    same order (with whatever gradients this rank owns, maybe none), and the inner step runs without them."""
    with oarlock.no_grad():
        for group in optimizer._param_groups:
            clip = group["grad_clip"]
            pairs = [(p, p.grad) for p in group["params"]
                     if id(p) in owned and not p.stop_gradient and p.grad is not None]
            if clip is not None and (pairs or isinstance(clip, HybridParallelClipGrad)):
                clip(pairs)
    with owned_only(optimizer, owned), _clips_off(optimizer):
        optimizer.step()


def broadcast_from_owners(params: list, owners: list, group) -> None:
    """Copy each trainable parameter from its owner (a rank of `group`) to the rest of the group."""
    if group is None or group.nranks <= 1:
        return
    with oarlock.no_grad():
        tasks = [dist.broadcast(p, src=group.ranks[owner], group=group, sync_op=False)
                 for p, owner in zip(params, owners) if not p.stop_gradient]
        for task in tasks:
            task.wait()


def owner_key(key: str, names: set):
    """The parameter name a state_dict key of the optimizer belongs to ("<name>_step", "<name>_<state>_0"), the
    longest name that fits (a name may be a prefix of another)."""
    if key.endswith("_step") and key[:-5] in names:
        return key[:-5]
    best = None
    for cut in range(len(key)):
        if key[cut] == "_" and key[:cut] in names and key.endswith("_0"):
            best = key[:cut]
    return best


def owned_state(optimizer, state_dict: dict, owned: set) -> dict:
    """The entries of a (full or sharded) optimizer state_dict that belong to the owned parameters."""
    every = set(optimizer._keys.values())
    mine = {optimizer._keys[id(p)] for p in parameters_of(optimizer) if id(p) in owned}
    out = {}
    for key, value in state_dict.items():
        if key == "LR_Scheduler":
            out[key] = value
        elif key == "master_weights":
            out[key] = {name: v for name, v in value.items() if name in mine}
        else:
            owner = owner_key(key, every)
            if owner is None or owner in mine:   # unknown keys go on: the inner optimizer warns about them
                out[key] = value
    return out


def owned_sharded_state_dict(optimizer, owned: set, model_sharded_state_dict, what: str) -> dict:
    """The optimizer's sharded_state_dict (FlexCheckpoint ShardedWeights) for the owned parameters only: each
    state is written by its owner, the one rank that holds it."""
    build = getattr(optimizer, "sharded_state_dict", None)
    if build is None:
        raise RuntimeError(f"{what}.sharded_state_dict(): the inner optimizer {type(optimizer).__name__} has no "
                           f"sharded_state_dict()")
    with owned_only(optimizer, owned):
        return build(model_sharded_state_dict)


class OwnedOptimizerState:
    """The state methods of a sharded optimizer (stage 1's DygraphShardingOptimizer, stage 2's
    GroupShardedOptimizerStage2): the inner optimizer's state, for the parameters this rank owns. Subclasses
    name the attribute holding the inner optimizer in _INNER and their class in _NAME (for errors), and keep
    the ids of the owned parameters in _owned."""

    _INNER = "_optim"
    _NAME = ""

    def _inner_optimizer(self):
        return getattr(self, self._INNER)

    def state_dict(self) -> dict:
        """The inner optimizer's state: the owned parameters' only, keyed as the unsharded optimizer keys them."""
        return self._inner_optimizer().state_dict()

    def set_state_dict(self, state_dict):
        """Load the entries of `state_dict` (a full or a sharded optimizer state) that belong to the owned
        parameters."""
        inner = self._inner_optimizer()
        with owned_only(inner, self._owned):
            inner.set_state_dict(owned_state(inner, state_dict, self._owned))

    set_dict = load_state_dict = set_state_dict

    def sharded_state_dict(self, model_sharded_state_dict):
        """The owned states as ShardedWeights (FlexCheckpoint): each moment sharded like its parameter in
        `model_sharded_state_dict` (a tensor-parallel slice's moments are the same slice), written by the owner
        rank only, since only the owner holds it."""
        return owned_sharded_state_dict(self._inner_optimizer(), self._owned, model_sharded_state_dict,
                                        self._NAME)


def fleet_model_parallel_group():
    """The model-parallel group of fleet when fleet.init ran with mp_degree > 1, else None."""
    from oarlock_parallel import fleet
    hcg = fleet._state["hcg"]
    if hcg is None or hcg.get_model_parallel_world_size() <= 1:
        return None
    return hcg.get_model_parallel_group()
