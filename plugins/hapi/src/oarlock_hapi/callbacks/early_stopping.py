"""EarlyStopping: stop fit when the monitored evaluation value has not improved for `patience` evaluations, and
save the best model to `save_dir/best_model` (save_dir is fit's, set by config_callbacks)."""

from __future__ import annotations

import os

import numpy as np

from oarlock_hapi.callbacks.base import Callback
from oarlock_hapi.callbacks.monitor import monitored_value, resolve_mode


class EarlyStopping(Callback):
    """Paddle 3.2's EarlyStopping: `monitor` a log name ('loss', 'acc', ...), `mode` 'auto'/'min'/'max',
    `min_delta` the least change that counts as improvement, `baseline` a value to beat first."""

    def __init__(self, monitor="loss", mode="auto", patience=0, verbose=1, min_delta=0, baseline=None,
                 save_best_model=True):
        super().__init__()
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.wait_epoch = 0
        self.best_weights = None
        self.stopped_epoch = 0
        self.save_best_model = save_best_model
        self.save_dir = None   # set by config_callbacks from fit's save_dir
        greater = resolve_mode("EarlyStopping", mode, monitor) == "max"
        self.monitor_op = np.greater if greater else np.less
        self.min_delta = abs(min_delta) if greater else -abs(min_delta)

    def on_train_begin(self, logs=None):
        self.wait_epoch = 0
        if self.baseline is not None:
            self.best_value = self.baseline
        else:
            self.best_value = np.inf if self.monitor_op == np.less else -np.inf
            self.best_weights = None

    def on_eval_end(self, logs=None):
        current = monitored_value("EarlyStopping", self.monitor, logs)
        if current is None:
            return
        if self.monitor_op(current - self.min_delta, self.best_value):
            self.best_value = current
            self.wait_epoch = 0
            if self.save_best_model and self.save_dir is not None:
                self.model.save(os.path.join(self.save_dir, "best_model"))
        else:
            self.wait_epoch += 1
        if self.wait_epoch >= self.patience:
            self.model.stop_training = True
            if self.verbose > 0:
                print(f"Epoch {self.stopped_epoch + 1}: Early stopping.")
                if self.save_best_model and self.save_dir is not None:
                    best = os.path.abspath(os.path.join(self.save_dir, "best_model"))
                    print(f"Best checkpoint has been saved at {best}")
        self.stopped_epoch += 1
