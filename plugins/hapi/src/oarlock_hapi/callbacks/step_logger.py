"""What Paddle's scalar-logging callbacks (VisualDL, WandbCallback) share: rank 0 writes, the train step counter,
and the epoch / evaluation bookkeeping their `_updates(logs, mode)` reads."""

from __future__ import annotations

from oarlock_hapi.callbacks.base import Callback
from oarlock_hapi.ranks import local_rank


class StepLogger(Callback):
    """Subclasses implement `_updates(logs, mode)` (mode "train" or "eval")."""

    def _is_write(self):
        return local_rank() == 0

    def on_train_begin(self, logs=None):
        self.epochs = self.params["epochs"]
        self.train_metrics = self.params["metrics"]
        self._is_fit = True
        self.train_step = 0

    def on_epoch_begin(self, epoch=None, logs=None):
        self.steps = self.params["steps"]
        self.epoch = epoch

    def on_train_batch_end(self, step, logs=None):
        self.train_step += 1
        self._updates(logs or {}, "train")

    def on_eval_begin(self, logs=None):
        logs = logs or {}
        self.eval_steps = logs.get("steps")
        self.eval_metrics = logs.get("metrics", [])
        self.eval_step = 0
        self.evaled_samples = 0

    def _updates(self, logs, mode):
        raise NotImplementedError
