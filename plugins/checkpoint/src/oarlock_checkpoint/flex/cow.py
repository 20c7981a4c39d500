"""Copy-on-write snapshots for async saves (OARLOCK_ASYNC_SAVE=cow, the default).

save_state_dict(async_save=True) returns without copying the tensors: the background writer reads
each tensor's bytes straight from the tensor's own memory, in chunks, and training goes on. Each
saved CPU tensor gets a write guard (plugin_api.guard_writes): before an oarlock op writes into its
storage (add_, an optimizer's fused step on it, setitem, copy_, a write through a view, ...), the
guard copies the part the writer has not read yet into a private buffer (staging.py, reused between
saves) and the writer reads the rest from there. Once a tensor is written, or copied, its guard is
removed, so later steps pay nothing. OARLOCK_ASYNC_SAVE_PRECOPY=1 adds a background copier that
copies tensors from the end of the writer's order while training computes, so that the first
optimizer update after a save finds less to copy; it is off by default because on a machine
without idle cores (bench/checkpoint.py on 2 shared cores) its copying took more from the training
step than it saved the update.

What the guards cannot see, and what is done about it:
- writes that bypass oarlock: numpy writes into `tensor.numpy()` or another array sharing the
  memory. Nothing can catch those; do not write a saved tensor that way before the save finishes
  (or use OARLOCK_ASYNC_SAVE=copy).
- writes an op's kernel makes into arguments it does not declare: ops declare the state they write
  besides their in-place target (OpDef `writes=`: the optimizer steps' moments and velocities), and
  the dispatcher calls those guards too; but a multi-precision optimizer writes the float32 master
  weight through its parameter, batch_norm updates its running statistics inside an out-of-place
  op, and embedding(max_norm=) renormalises rows of its weight. So: tensors under SMALL bytes
  (running statistics, biases) are copied before the call returns, and every saved tensor that is
  not a trainable parameter (stop_gradient=True: optimizer state, master weights, buffers) is
  copied as soon as the first guard of this save fires (an optimizer step calls the guard of the
  parameter it is on before its kernel writes) -- or before the call returns when the save holds
  no trainable parameter to raise that
  alarm. The copier takes those tensors first. An embedding with max_norm, renormalising a saved
  weight in the forward pass before any update, is not covered.
"""

from __future__ import annotations

import os
import threading

import numpy as np
from oarlock.plugin_api import guard_writes

from oarlock_checkpoint.flex import staging

SMALL = 1 << 20          # bytes: tensors up to this size are copied at the call
READ_CHUNK = 8 << 20     # bytes the writer reads per turn; a guard waits for at most one such turn

# what the guards did, for tests and the benchmark: guard calls, tensors copied by them and by the copier,
# bytes copied in all
counts = {"guard_calls": 0, "guard_copies": 0, "precopies": 0, "copied_bytes": 0}
_counts_lock = threading.Lock()


def precopy_enabled() -> bool:
    return os.environ.get("OARLOCK_ASYNC_SAVE_PRECOPY", "0") == "1"


def _count(what: str, n: int = 1, nbytes: int = 0) -> None:
    with _counts_lock:
        counts[what] += n
        counts["copied_bytes"] += nbytes


class Source:
    """One tensor's bytes as the writer reads them: the tensor's own array until something is about
    to write it, then a private copy of the part not read yet. Has the array's dtype, shape and nbytes
    (what a file header needs), stream() for the writer and whole() for writers that need the array
    at once (pickled files)."""

    def __init__(self, key: str, array: np.ndarray, tensor, on_done):
        self.key, self.tensor, self._array = key, tensor, array
        self.dtype, self.shape, self.nbytes = array.dtype, array.shape, array.nbytes
        self._bytes = array.reshape(-1).view(np.uint8)
        self._pos = 0              # bytes the writer has read
        self._private = None       # the staging array once copied
        self._done = False
        self._lock = threading.Lock()
        self._on_done = on_done

    @property
    def settled(self) -> bool:
        """Written or copied: nothing training does can change what is saved any more."""
        return self._done or self._private is not None

    def detach(self, why: str) -> None:
        """Copy what the writer has not read yet into the staging buffer and read from there on."""
        with self._lock:
            if self._done or self._private is not None:
                return
            private = staging.buffer(self.key, self._array)
            rest = private.reshape(-1).view(np.uint8)[self._pos:]
            staging.copy([(rest, self._bytes[self._pos:])])
            self._private, self._bytes = private, private.reshape(-1).view(np.uint8)
            _count(why, 1, len(rest))
        self._on_done(self)

    def stream(self, consume) -> None:
        """consume(piece) for each piece of the bytes in order; no write reaches a piece while it is consumed."""
        chunk = READ_CHUNK
        while True:
            with self._lock:
                piece = self._bytes[self._pos:self._pos + chunk]
                if not len(piece):
                    self._done = True
                    break
                consume(piece)
                self._pos += len(piece)
        self._on_done(self)

    def whole(self) -> np.ndarray:
        """The saved values as one array (copied now unless already copied)."""
        self.detach("precopies")
        with self._lock:
            return self._private if self._private is not None else self._array


class Snapshot:
    """The saved CPU tensors of one async save, guarded until each is written or copied."""

    def __init__(self, items: dict):
        """items: {key: (tensor, array)}, the array being the tensor's own C-contiguous memory."""
        self._lock = threading.Lock()
        self._alarmed = False
        self._closed = False
        self.sources = {key: Source(key, array, tensor, self._settled) for key, (tensor, array) in items.items()}
        staging.keep_only(self.sources)
        # tensors sharing memory (tied weights, a view and its base) share one guard: a write to one
        # is a write to all
        self._groups = {}
        for source in self.sources.values():
            self._groups.setdefault(id(_root(source._array)), []).append(source)
        self._group_of = {id(s): group for group in self._groups.values() for s in group}
        self._followers = [s for s in self.sources.values() if s.tensor.stop_gradient]
        trainable = len(self._followers) < len(self.sources)
        for source in self.sources.values():
            if source.nbytes <= SMALL or (not trainable and source.tensor.stop_gradient):
                source.detach("precopies")
        for group in self._groups.values():
            if not all(s.settled for s in group):
                guard = self._guard_for(group)
                for s in group:
                    guard_writes(s.tensor, guard)
        self._copier = None

    def start_precopy(self, order: list) -> None:
        """Copy the unsettled tensors in a background thread: the followers first, then from the end of
        the writer's `order` (keys) backwards, meeting the writer in the middle."""
        ahead = [s for s in self._followers] + [self.sources[k] for k in reversed(order) if k in self.sources]
        if not any(not s.settled for s in ahead):
            return

        def run():
            for source in ahead:
                if self._closed:
                    return
                source.detach("precopies")

        self._copier = threading.Thread(target=run, name="oarlock-async-save-copier", daemon=True)
        self._copier.start()

    def _guard_for(self, group: list):
        def guard(_tensor) -> None:   # runs in whatever thread is about to write, before the write
            _count("guard_calls")
            self._alarm()
            for s in group:
                s.detach("guard_copies")
        return guard

    def _alarm(self) -> None:
        """The first guard call of this save: training has started writing, and some of its writes (an
        optimizer step's moments) will not call the guards of the tensors they write."""
        with self._lock:
            if self._alarmed:
                return
            self._alarmed = True
        for s in self._followers:
            s.detach("guard_copies")

    def _settled(self, source: Source) -> None:
        """A tensor written or copied: once its whole group is, drop the group's guard."""
        group = self._group_of[id(source)]
        if all(s.settled for s in group):
            for s in group:
                guard_writes(s.tensor, None)

    def close(self) -> None:
        """The save ended (written, or failed): no guard stays behind, the copier stops."""
        self._closed = True
        if self._copier is not None:
            self._copier.join()
        for source in self.sources.values():
            guard_writes(source.tensor, None)


def _root(array: np.ndarray):
    """The object that owns the memory of `array` (views chain to it through .base)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array if array.base is None else array.base
