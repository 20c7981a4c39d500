"""VisualDL: log training and evaluation scalars during fit, as Paddle 3.2's VisualDL callback does.

VisualDL itself is not available here, so the scalars go to TensorBoard event files written by
oarlock.utils.tensorboard.SummaryWriter (plugin oarlock-tensorboard) in `log_dir`: view them with TensorBoard
(or any reader of TensorBoard event files) instead of VisualDL. The tags and steps are Paddle's: `train/<name>`
at the global training step after every batch, `eval/<name>` at the epoch after every evaluation."""

from __future__ import annotations

import numbers

import oarlock.utils.tensorboard
from oarlock_hapi.callbacks.step_logger import StepLogger


class VisualDL(StepLogger):
    """Writes `train/loss`, `train/acc`, ..., `eval/loss`, ... scalars to TensorBoard event files in `log_dir`."""

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = log_dir
        self.epochs = None
        self.steps = None
        self.epoch = 0
        self.writer = None

    def _updates(self, logs, mode):
        if not self._is_write():
            return
        if self.writer is None:
            self.writer = oarlock.utils.tensorboard.SummaryWriter(self.log_dir)
        step = self.train_step if mode == "train" else self.epoch
        for k in getattr(self, f"{mode}_metrics"):
            if k not in logs:
                continue
            value = logs[k]
            if isinstance(value, (list, tuple)):
                value = value[0]
            elif not isinstance(value, numbers.Number):
                continue
            self.writer.add_scalar(f"{mode}/{k}", float(value), global_step=step)

    def _close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def on_train_end(self, logs=None):
        self._close()

    def on_eval_end(self, logs=None):
        self._updates(logs or {}, "eval")
        if not getattr(self, "_is_fit", False):   # a standalone evaluate: nothing more will be written
            self._close()
