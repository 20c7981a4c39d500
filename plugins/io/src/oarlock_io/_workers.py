"""Multi-process loading for DataLoader(num_workers > 0).

Each worker process owns a fetcher and an index queue; the main process
hands out batch requests round-robin, keeps `prefetch_factor` requests per
worker in flight, and puts the results back in request order. Workers
pickle each batch themselves, so a batch that cannot be pickled is reported
as that worker's error instead of failing silently in a queue thread.

With an IterableDataset every worker iterates its own copy of the dataset:
use `get_worker_info()` inside `__iter__` to give each worker its own shard,
as in Paddle and torch. Each worker seeds oarlock, numpy's global generator
and `random` with its own seed (drawn from oarlock's cpu generator each
epoch), so random augmentations differ between workers but stay reproducible
under `oarlock.seed`. Workers are started for each epoch: persistent_workers
is accepted and has no effect yet.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import random
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

import oarlock
from oarlock_io.fetch import EXHAUSTED

_POLL_SECONDS = 1.0  # how often a waiting main process checks that its workers are alive


@dataclass
class WorkerInfo:
    """What `get_worker_info()` returns inside a worker process."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process: its WorkerInfo (id, num_workers, seed, dataset). In the main
    process: None."""
    return _worker_info


@dataclass
class _Exhausted:
    worker_id: int


@dataclass
class _Failure:
    worker_id: int
    text: str


def _seed_everything(seed: int) -> None:
    oarlock.seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def _worker_loop(make_fetcher, dataset, index_queue, result_queue, worker_id, num_workers, seed, init_fn):
    global _worker_info
    result_queue.cancel_join_thread()  # at shutdown nobody reads: exit without flushing
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    fetcher, failure = None, None
    try:
        _seed_everything(seed)
        if init_fn is not None:
            init_fn(worker_id)
        fetcher = make_fetcher()
    except Exception:
        failure = _Failure(worker_id, traceback.format_exc())
    while True:
        try:
            task = index_queue.get()
        except KeyboardInterrupt:  # the main process handles Ctrl-C and will shut us down
            continue
        except (EOFError, OSError):  # the main process is gone
            break
        if task is None:
            break
        batch_index, indices = task
        if failure is not None:
            result = failure
        else:
            try:
                result = fetcher.fetch(indices)
                if result is EXHAUSTED:
                    result = _Exhausted(worker_id)
                result = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                result = _Failure(worker_id, traceback.format_exc())
        result_queue.put((batch_index, result))


class MultiProcessIterator:
    """One epoch over a DataLoader with worker processes."""

    def __init__(self, make_fetcher, dataset, index_iter, num_workers, prefetch_factor, timeout, init_fn, finish,
                 base_seed: int):
        """`index_iter` yields what each request fetches (None for an IterableDataset: endless requests);
        worker i is seeded with base_seed + i."""
        self._index_iter, self._finish, self._timeout = index_iter, finish, timeout
        ctx = multiprocessing.get_context()
        self._results = ctx.Queue()
        self._queues, self._workers = [], []
        for worker_id in range(num_workers):
            index_queue = ctx.Queue()
            index_queue.cancel_join_thread()
            worker = ctx.Process(target=_worker_loop, daemon=True,
                                 args=(make_fetcher, dataset, index_queue, self._results, worker_id, num_workers,
                                       base_seed + worker_id, init_fn))
            worker.start()
            self._queues.append(index_queue)
            self._workers.append(worker)
        self._active = [True] * num_workers
        self._next_worker = 0
        self._sent = self._received = 0
        self._waiting: dict[int, Any] = {}  # results that came back before their turn
        self._closed = False
        for _ in range(prefetch_factor * num_workers):
            self._request()

    def _request(self) -> None:
        """Send the next request to the next worker whose stream is not exhausted."""
        n = len(self._workers)
        for step in range(n):
            worker_id = (self._next_worker + step) % n
            if self._active[worker_id]:
                break
        else:
            return
        task = next(self._index_iter, EXHAUSTED)
        if task is EXHAUSTED:
            return
        self._queues[worker_id].put((self._sent, task))
        self._sent += 1
        self._next_worker = (worker_id + 1) % n

    def _get(self):
        deadline = time.monotonic() + self._timeout if self._timeout else None
        while True:
            wait = _POLL_SECONDS if deadline is None else max(0.0, min(_POLL_SECONDS, deadline - time.monotonic()))
            try:
                return self._results.get(timeout=wait)
            except queue.Empty:
                pass
            for worker_id, worker in enumerate(self._workers):
                if not worker.is_alive():
                    self.close(terminate=True)
                    raise RuntimeError(f"DataLoader worker {worker_id} (pid {worker.pid}) exited unexpectedly with "
                                       f"exit code {worker.exitcode}")
            if deadline is not None and time.monotonic() >= deadline:
                self.close(terminate=True)
                raise RuntimeError(f"DataLoader: no batch came from the workers within timeout={self._timeout} s")

    def __iter__(self):
        return self

    def __next__(self):
        while self._received < self._sent:
            result = self._waiting.pop(self._received, None)
            if result is None:
                batch_index, result = self._get()
                if batch_index != self._received:
                    self._waiting[batch_index] = result
                    continue
            self._received += 1
            if isinstance(result, _Failure):
                self.close(terminate=True)
                raise RuntimeError(f"DataLoader worker {result.worker_id} failed:\n{result.text}")
            result = pickle.loads(result)
            if isinstance(result, _Exhausted):
                self._active[result.worker_id] = False
                self._request()
                continue
            self._request()
            return self._finish(result)
        self.close()
        raise StopIteration

    def close(self, terminate: bool = False) -> None:
        """Stop the workers (idempotent): ask them to exit, or, after an error, terminate them at once."""
        if self._closed:
            return
        self._closed = True
        for index_queue in self._queues:
            index_queue.put(None)
        for worker in self._workers:
            if not terminate:
                worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()
            worker.join()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the queues may already be gone
            pass
