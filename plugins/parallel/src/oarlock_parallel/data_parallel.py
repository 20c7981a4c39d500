"""oarlock.DataParallel (Paddle's paddle.DataParallel): every rank of a group runs the whole model
on its share of the batch, and the gradients are averaged over the group during backward.

The parameters are broadcast from the group's first rank when the model is wrapped. The
trainable parameters are split into buckets (oarlock_parallel.buckets) of about
comm_buffer_size MB, the first of last_comm_buffer_size MB. A gradient hook on every parameter
fires as soon as backward has its final gradient (the engine finalizes a leaf once its last
node has run); when a bucket's last gradient is in, the bucket is flattened and its all-reduce
starts asynchronously, while backward goes on with earlier layers. Buckets are launched in
their fixed order on every rank, so the collectives match across ranks. A callback queued on the
backward waits for all of them once every gradient is in place, so optimizer.step() sees the
averages. Under no_sync() the gradients only accumulate locally; the next synchronized backward
averages the accumulated sums.
"""

from __future__ import annotations

import contextlib

import oarlock
import oarlock.distributed as dist
from oarlock.nn import Layer

from oarlock_parallel import buckets
from oarlock_parallel.bucket_rounds import BucketRounds
from oarlock_parallel.dp_utils import broadcast_model, resolve_group
from oarlock_parallel.wrapper import WrapperLayer

_WHAT = "DataParallel()"


class _Reducer(BucketRounds):
    """DataParallel's rounds: each bucket's gradient sums all-reduced (averaged) over the group."""

    def __init__(self, named_params: list, group, limits_mb: list, find_unused: bool):
        self.names = [name for name, _ in named_params]
        self.group, self.find_unused = group, find_unused
        params = [param for _, param in named_params]
        self.buckets = buckets.assign(params, limits_mb)
        super().__init__(params, self.buckets)

    def _new_round(self):
        self.totals = [None] * len(self.params)          # this rank's gradient sums, once final

    def _take(self, index: int, grad):
        param = self.params[index]
        # the engine adds `grad` to .grad after the hooks: the sum is what gets averaged, so that
        # gradients accumulated under no_sync() are averaged too
        self.totals[index] = grad if param.grad is None else param.grad + grad

    def _launch(self, bucket: int) -> tuple:
        members = self.buckets[bucket]
        with oarlock.no_grad():
            flat = buckets.flatten([self.totals[i].detach() for i in members])
        return flat, dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=self.group, sync_op=False)

    def _complete(self):
        unready = [i for b in range(len(self.launched), len(self.buckets)) for i in self.buckets[b]
                   if self.totals[i] is None]
        if unready and not self.find_unused:
            names = [self.names[i] for i in sorted(unready)]
            raise RuntimeError(
                f"DataParallel: parameter(s) {names} received no gradient in this backward, so their "
                f"gradient bucket(s) cannot be all-reduced. Pass find_unused_parameters=True to "
                f"DataParallel to treat them as zero gradients, or set stop_gradient=True on them")
        for i in unready:       # find_unused_parameters: an unused parameter contributes zeros
            param = self.params[i]
            self.totals[i] = param.grad if param.grad is not None else oarlock.zeros_like(param)
        for bucket in range(len(self.buckets)):
            self.missing[bucket] = 0
        self._launch_ready()
        self._write_back()

    def _write_back(self):
        for bucket, flat, task in self.launched:
            task.wait()
            members = self.buckets[bucket]
            pieces = buckets.unflatten(flat, [self.params[i] for i in members])
            for i, piece in zip(members, pieces):
                self.params[i].grad = piece.detach()


class DataParallel(WrapperLayer):
    """Run `layers` data-parallel over `group` (the world when None): Paddle's paddle.DataParallel.

    strategy is accepted for Paddle's signature and unused (the group says who takes part).
    Buffer sizes are in MB. With find_unused_parameters, parameters that get no gradient in a
    backward count as zero gradients; without it that is an error naming them. With one process
    the wrapper only forwards to `layers`."""

    def __init__(self, layers, strategy=None, comm_buffer_size=25, last_comm_buffer_size=1,
                 find_unused_parameters=False, group=None):
        super().__init__()
        if not isinstance(layers, Layer):
            raise TypeError(f"{_WHAT}: layers must be an oarlock.nn.Layer, got {type(layers).__name__}")
        limits = [buckets.check_size(last_comm_buffer_size, _WHAT, "last_comm_buffer_size"),
                  buckets.check_size(comm_buffer_size, _WHAT, "comm_buffer_size")]
        if not isinstance(find_unused_parameters, bool):
            raise TypeError(f"{_WHAT}: find_unused_parameters must be a bool, got {find_unused_parameters!r}")
        self._layers = layers
        self.find_unused_parameters = find_unused_parameters
        self.comm_buffer_size, self.last_comm_buffer_size = comm_buffer_size, last_comm_buffer_size
        self.group = resolve_group(group, _WHAT)
        self._reducer = None
        if self.group is not None and self.group.nranks > 1:
            broadcast_model(layers, self.group)
            trainable = [(name, p) for name, p in layers.named_parameters() if not p.stop_gradient]
            self._reducer = _Reducer(trainable, self.group, limits, find_unused_parameters)

    def forward(self, *inputs, **kwargs):
        if self._reducer is not None:
            self._reducer.abandon()       # a new forward: any backward before it is over
        return self._layers(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside only accumulate gradients locally (gradient accumulation); the
        first backward after it averages the accumulated gradients."""
        reducer = self._reducer
        if reducer is None:
            yield
            return
        previous, reducer.enabled = reducer.enabled, False
        try:
            yield
        finally:
            reducer.enabled = previous

    def scale_loss(self, loss):
        """Paddle's no-op: the averaging happens on the gradients."""
        return loss

    @property
    def bucket_count(self) -> int:
        """How many gradient buckets (fused all-reduces) a backward uses; 0 with one process."""
        return 0 if self._reducer is None else len(self._reducer.buckets)

    @property
    def launched_buckets(self) -> int:
        """How many buckets' all-reduces the running backward has started so far (observable from a
        gradient hook: buckets launched while backward still runs overlap with it)."""
        return 0 if self._reducer is None else len(self._reducer.launched)


def wrap_model(strategy, model, hcg, user_strategy):
    """The data-parallel step of fleet.distributed_model (Paddle's fleet/model.py): DataParallel over
    the data-parallel group, its buffers from the DistributedStrategy's fuse_grad_size_in_MB,
    last_comm_group_size_MB and find_unused_parameters."""
    return DataParallel(model, comm_buffer_size=getattr(user_strategy, "fuse_grad_size_in_MB", 25),
                        last_comm_buffer_size=getattr(user_strategy, "last_comm_group_size_MB", 1),
                        find_unused_parameters=getattr(user_strategy, "find_unused_parameters", False),
                        group=hcg.get_data_parallel_group())


def wrap_optimizer(strategy, optimizer, hcg, user_strategy):
    """The data-parallel step of fleet.distributed_optimizer: the optimizer as it is (DataParallel
    has averaged the gradients before step())."""
    return optimizer
