"""Sharding stage 2's gradient reduction during backward: each gradient is averaged onto its owner rank
as soon as it is final, and the other ranks drop it, so after backward each rank holds only the gradients of
the parameters it owns (Paddle's GroupShardedStage2 reduce hooks).

A gradient hook on every trainable parameter fires once backward has its final gradient (the rounds of
bucket_rounds.py). Parameters are grouped, in the order backward reaches them (reverse registration), into
buckets of consecutive parameters with one owner and one dtype, up to `buffer_max_size` elements; when a
bucket's last gradient is in, the bucket is flattened and its reduce to the owner starts asynchronously while
backward goes on. Buckets launch in their fixed order on every rank, so the collectives match. A callback
queued on the backward waits for them at its end: the owner's gradient becomes the average (added to what
earlier backwards left it, for gradient accumulation), every other rank's becomes None.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist

from oarlock_parallel import buckets
from oarlock_parallel.bucket_rounds import BucketRounds


def owner_buckets(params: list, owners: list, limit: int) -> list:
    """[(owner, [indices])] in backward order: runs of consecutive parameters with one owner and dtype,
    each of at most `limit` elements (a larger parameter is a bucket of its own)."""
    out, size = [], 0
    for index in reversed(range(len(params))):
        param, owner = params[index], owners[index]
        last = out[-1] if out else None
        if (last is None or last[0] != owner or params[last[1][0]].dtype != param.dtype
                or size + param.size > limit):
            out.append((owner, []))
            size = 0
        out[-1][1].append(index)
        size += param.size
    return out


class OwnerReducer(BucketRounds):
    """The hooks and per-backward state that average `params`' gradients onto `owners` (ranks of `group`)."""

    def __init__(self, names: list, params: list, owners: list, group, buffer_max_size: int):
        self.names, self.owners, self.group = names, owners, group
        self.buckets = owner_buckets(params, owners, max(int(buffer_max_size), 1))
        super().__init__(params, [members for _, members in self.buckets])

    def _new_round(self):
        self.fresh = [None] * len(self.params)       # this backward's local gradients, until flattened
        self.previous = [None] * len(self.params)    # what the gradient was before this backward
        self.seen = [False] * len(self.params)

    def _take(self, index: int, grad):
        # the engine stores previous + grad in a new tensor after the hooks: `previous` stays as it is
        self.previous[index] = self.params[index].grad
        self.fresh[index], self.seen[index] = grad.detach(), True

    def _launch(self, bucket: int) -> tuple:
        owner, members = self.buckets[bucket]
        with oarlock.no_grad():
            flat = buckets.flatten([self.fresh[i] for i in members])
        for i in members:
            self.fresh[i] = None
        return flat, dist.reduce(flat, dst=self.group.ranks[owner], op=dist.ReduceOp.AVG, group=self.group,
                                 sync_op=False)

    def _complete(self):
        unused = [self.names[i] for i, seen in enumerate(self.seen) if not seen]
        if unused:
            raise RuntimeError(
                f"GroupShardedStage2: parameter(s) {unused} received no gradient in this backward, so their "
                f"gradient bucket(s) cannot be reduced to their owners; set stop_gradient=True on parameters "
                f"the loss does not use")
        me = self.group.rank
        for bucket, flat, task in self.launched:
            task.wait()
            owner, members = self.buckets[bucket]
            if owner != me:
                for i in members:
                    self.params[i].grad = None
                continue
            pieces = buckets.unflatten(flat, [self.params[i] for i in members])
            for i, piece in zip(members, pieces):
                before = self.previous[i]
                self.params[i].grad = piece.detach() if before is None else (before + piece).detach()
