"""Worker threads for the save path, made with `threading` directly: an async save may still be
writing while the interpreter shuts down (its exit waits for the save), and concurrent.futures
refuses new work by then."""

from __future__ import annotations

import queue
import threading


def run_parallel(fn, tasks: list, workers: int) -> None:
    """fn(*task) for every task, on `workers` threads (the caller's included)."""
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            fn(*task)
        return
    todo, errors = iter(tasks), []
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                task = next(todo, None)
            if task is None or errors:
                return
            try:
                fn(*task)
            except BaseException as exc:
                errors.append(exc)

    helpers = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(tasks)) - 1)]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]


class Beside:
    """One helper thread running calls beside the caller: `start(fn, arg)` returns a wait() that
    returns what fn(arg) returned once it ran (or raises what it raised). Use as a context manager."""

    def __init__(self):
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="oarlock-checkpoint-helper", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, arg, done, outcome = job
            try:
                outcome.append((True, fn(arg)))
            except BaseException as exc:
                outcome.append((False, exc))
            done.set()

    def start(self, fn, arg):
        done, outcome = threading.Event(), []
        self._jobs.put((fn, arg, done, outcome))

        def wait():
            done.wait()
            ok, value = outcome[0]
            if not ok:
                raise value
            return value
        return wait

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._jobs.put(None)
        self._thread.join()
