"""ProgBarLogger: the progress bar and log lines fit/evaluate/predict print, in Paddle 3.2's format.

Each phase (train, eval, predict) has a bar over its steps; every `log_freq` steps the bar shows the loss of the
current batch and the metrics accumulated so far, and the phase's end shows the final values. verbose=3 adds
reader cost, batch cost and samples per second over the steps since the last line. Only local rank 0 prints."""

from __future__ import annotations

import time

from oarlock_hapi.callbacks.base import Callback
from oarlock_hapi.progressbar import ProgressBar
from oarlock_hapi.ranks import local_rank


class _Phase:
    """One phase's bar, step count, sample count and timers."""

    def __init__(self, steps, metrics, verbose):
        self.steps = steps
        self.metrics = metrics
        self.step = 0
        self.samples = 0
        self.progbar = ProgressBar(num=steps, verbose=verbose)
        self.data_time = self.batch_time = 0.0
        self.count = self.timed_samples = 0
        self.batch_start = time.time()
        self.data_end = self.batch_start

    def batch_begin(self):
        self.data_end = time.time()
        self.data_time += self.data_end - self.batch_start

    def batch_end(self, logs):
        self.step += 1
        samples = logs.get("batch_size", 1)
        self.samples += samples
        self.batch_time += time.time() - self.data_end
        self.count += 1
        self.timed_samples += samples
        self.batch_start = time.time()

    def costs(self):
        """verbose=3's timing values since the last line, then restart the counts."""
        count = self.count if self.count > 0 else 1.0
        samples = self.timed_samples if self.timed_samples > 0 else 1.0
        elapsed = self.data_time + self.batch_time
        values = [("avg_reader_cost", "%.5f sec" % (self.data_time / count)),
                  ("avg_batch_cost", "%.5f sec" % (self.batch_time / count)),
                  ("ips", "%.5f samples/sec" % (samples / elapsed if elapsed > 0 else 0.0))]
        self.count = self.timed_samples = 0
        self.data_time = self.batch_time = 0.0
        return values


class ProgBarLogger(Callback):
    """Logs progress: `log_freq` steps between lines, `verbose` 0 (silent), 1 (one bar per epoch), 2 (one line
    per log) or 3 (2 plus timing)."""

    def __init__(self, log_freq=1, verbose=2):
        super().__init__()
        if not isinstance(log_freq, int) or isinstance(log_freq, bool) or log_freq < 1:
            raise ValueError(f"ProgBarLogger(): argument 'log_freq' must be an int >= 1, got {log_freq!r}")
        self.epochs = None
        self.steps = None
        self.progbar = None
        self.verbose = verbose
        self.log_freq = log_freq
        self._phases = {}

    def _is_print(self):
        return bool(self.verbose) and local_rank() == 0

    def _update(self, logs, mode):
        phase = self._phases[mode]
        values = [(k, logs[k]) for k in phase.metrics if k in logs]
        if self.verbose == 3:
            values += phase.costs()
        phase.progbar.update(phase.step, values)

    def _batch_end(self, mode, logs):
        phase = self._phases[mode]
        phase.batch_end(logs or {})
        if self._is_print() and phase.step % self.log_freq == 0:
            if phase.steps is None or phase.step < phase.steps:
                self._update(logs or {}, mode)

    # -- train ----------------------------------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self.epochs = self.params["epochs"]
        self.train_metrics = self.params["metrics"]
        if self._is_print():
            print("The loss value printed in the log is the current step, and the metric is the average value of "
                  "previous steps.")

    def on_epoch_begin(self, epoch=None, logs=None):
        self.steps = self.params["steps"]
        self.epoch = epoch
        if self.epochs and self._is_print():
            print(f"Epoch {epoch + 1}/{self.epochs}")
        self._phases["train"] = _Phase(self.steps, self.train_metrics, self.verbose)
        self.progbar = self._phases["train"].progbar

    def on_train_batch_begin(self, step, logs=None):
        self._phases["train"].batch_begin()

    def on_train_batch_end(self, step, logs=None):
        self._batch_end("train", logs)

    def on_epoch_end(self, epoch, logs=None):
        if self._is_print() and self.steps is not None:
            self._update(logs or {}, "train")

    # -- eval -----------------------------------------------------------------------------------------------------
    def on_eval_begin(self, logs=None):
        logs = logs or {}
        self._phases["eval"] = _Phase(logs.get("steps"), logs.get("metrics", []), self.verbose)
        if self._is_print():
            print("Eval begin...")

    def on_eval_batch_begin(self, step, logs=None):
        self._phases["eval"].batch_begin()

    def on_eval_batch_end(self, step, logs=None):
        self._batch_end("eval", logs)

    def on_eval_end(self, logs=None):
        phase = self._phases["eval"]
        if self._is_print() and phase.steps is not None:
            self._update(logs or {}, "eval")
            print(f"Eval samples: {phase.samples}")

    # -- predict --------------------------------------------------------------------------------------------------
    def on_predict_begin(self, logs=None):
        logs = logs or {}
        self._phases["predict"] = _Phase(logs.get("steps"), logs.get("metrics", []), self.verbose)
        if self._is_print():
            print("Predict begin...")

    def on_predict_batch_begin(self, step, logs=None):
        self._phases["predict"].batch_begin()

    def on_predict_batch_end(self, step, logs=None):
        self._batch_end("predict", logs)

    def on_predict_end(self, logs=None):
        phase = self._phases["predict"]
        if self._is_print():
            if phase.step % self.log_freq != 0 or self.verbose == 1:
                self._update(logs or {}, "predict")
            print(f"Predict samples: {phase.samples}")
