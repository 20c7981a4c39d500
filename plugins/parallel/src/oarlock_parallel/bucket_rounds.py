"""The per-backward skeleton of the gradient reducers that overlap communication with backward
(DataParallel's all-reduce, sharding stage 2's reduce to the owner).

A gradient hook on every parameter fires once backward has its final gradient. The first hook of a backward
queues a callback at its end (one "round"). A bucket's collective starts, asynchronously, when its last
gradient is in and every bucket before it has started: buckets launch in their fixed order on every rank,
so the collectives of the group match. At the end of backward the subclass writes the results back; every
started collective is then waited for (also when backward or the write-back raised), so none is left in
flight, and the round's state is forgotten.
"""

from __future__ import annotations

from oarlock.autograd import queue_callback


class BucketRounds:
    """Hooks on `params` and the round state for the buckets `members` ([parameter indices] of each bucket, in
    launch order). Subclasses give _new_round (their per-round state), _take (a parameter's final gradient),
    _launch (a complete bucket's collective: (flat tensor, task)) and _complete (the end of backward)."""

    def __init__(self, params: list, members: list):
        self.params = params
        self._members = members
        self.bucket_of = {index: b for b, indices in enumerate(members) for index in indices}
        self.enabled = True                      # off: the hooks let gradients through untouched
        self.handles = [param.register_hook(self._hook_for(index)) for index, param in enumerate(params)]
        self._reset()

    def _reset(self):
        self.missing = [len(indices) for indices in self._members]
        self.launched: list = []                  # (bucket, flat tensor, task), in bucket order
        self.round_open = False
        self._new_round()

    # -- what subclasses do ------------------------------------------------------------------
    def _new_round(self):
        raise NotImplementedError

    def _take(self, index: int, grad):
        raise NotImplementedError

    def _launch(self, bucket: int) -> tuple:
        raise NotImplementedError

    def _complete(self):
        raise NotImplementedError

    # -- during backward --------------------------------------------------------------------
    def _hook_for(self, index: int):
        def hook(grad):
            if self.enabled:
                self._ready(index, grad)
            return None
        return hook

    def _ready(self, index: int, grad):
        if not self.round_open:
            self.round_open = True
            queue_callback(self._finish)
        self._take(index, grad)
        self.missing[self.bucket_of[index]] -= 1
        self._launch_ready()

    def _launch_ready(self):
        """Start the collectives of the complete buckets that are next in the fixed bucket order."""
        while len(self.launched) < len(self._members) and self.missing[len(self.launched)] == 0:
            bucket = len(self.launched)
            self.launched.append((bucket, *self._launch(bucket)))

    # -- at the end of backward -------------------------------------------------------------
    def _finish(self):
        try:
            self._complete()
        finally:
            self._wait_launched()
            self._reset()

    def _wait_launched(self):
        for _, _, task in self.launched:         # never leave a collective of the group in flight
            task.wait()

    def abandon(self):
        """After a backward that raised before its end (its callback never ran): wait for the collectives it
        started, so the group's collectives stay matched, and forget its state."""
        if self.round_open:
            self._wait_launched()
            self._reset()

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []
