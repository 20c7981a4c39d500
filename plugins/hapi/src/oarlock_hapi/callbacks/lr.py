"""Learning-rate callbacks: LRScheduler steps the optimizer's scheduler after every batch (by_step, the default)
or every epoch (by_epoch); ReduceLROnPlateau lowers a float learning rate when the monitored evaluation value
stops improving. Both follow Paddle 3.2."""

from __future__ import annotations

import warnings

import numpy as np

import oarlock.optimizer
from oarlock_hapi.callbacks.base import Callback
from oarlock_hapi.callbacks.monitor import monitored_value, resolve_mode
from oarlock_hapi.ranks import local_rank


def scheduler_of(model):
    """The model's optimizer's LRScheduler, or None (no optimizer, or a float learning rate)."""
    optimizer = getattr(model, "_optimizer", None) if model is not None else None
    lr = getattr(optimizer, "_learning_rate", None)
    return lr if isinstance(lr, oarlock.optimizer.lr.LRScheduler) else None


class LRScheduler(Callback):
    """Steps the optimizer's learning-rate scheduler: after each training batch (by_step=True) or after each
    epoch (by_epoch=True); the two are exclusive."""

    def __init__(self, by_step=True, by_epoch=False):
        super().__init__()
        if by_step and by_epoch:
            raise ValueError("LRScheduler(): by_step option is mutually exclusive with by_epoch")
        self.by_step = by_step
        self.by_epoch = by_epoch

    def on_epoch_end(self, epoch, logs=None):
        scheduler = scheduler_of(self.model)
        if self.by_epoch and scheduler is not None:
            scheduler.step()

    def on_train_batch_end(self, step, logs=None):
        scheduler = scheduler_of(self.model)
        if self.by_step and scheduler is not None:
            scheduler.step()


class ReduceLROnPlateau(Callback):
    """Multiply the (float) learning rate by `factor` after `patience` evaluations without an improvement of at
    least `min_delta` in `monitor`, then wait `cooldown` evaluations; never below `min_lr`."""

    def __init__(self, monitor="loss", factor=0.1, patience=10, verbose=1, mode="auto", min_delta=1e-4,
                 cooldown=0, min_lr=0):
        super().__init__()
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau(): argument 'factor' must be < 1.0 (ReduceLROnPlateau does not "
                             f"support a factor >= 1.0), got {factor!r}")
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.mode = mode
        self.epoch = 0
        self._reset()

    def _reset(self):
        self.mode = resolve_mode("Learning rate reduction", self.mode, self.monitor)
        if self.mode == "min":
            self.monitor_op = lambda a, b: np.less(a, b - self.min_delta)
            self.best = np.inf
        else:
            self.monitor_op = lambda a, b: np.greater(a, b + self.min_delta)
            self.best = -np.inf
        self.cooldown_counter = 0
        self.wait = 0

    def on_train_begin(self, logs=None):
        self._reset()

    def in_cooldown(self):
        return self.cooldown_counter > 0

    def on_eval_end(self, logs=None):
        current = monitored_value("ReduceLROnPlateau", self.monitor, logs)
        if current is None:
            return
        optimizer = getattr(self.model, "_optimizer", None)
        lr = getattr(optimizer, "_learning_rate", None)
        if not isinstance(lr, float):
            warnings.warn(f"Expected learning_rate be float, bug got {type(lr)}.", stacklevel=2)
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = optimizer.get_lr()
                if old_lr > np.float32(self.min_lr):
                    new_lr = max(old_lr * self.factor, self.min_lr)
                    optimizer.set_lr(new_lr)
                    if self.verbose > 0 and local_rank() == 0:
                        print(f"\nEpoch {self.epoch + 1}: ReduceLROnPlateau reducing learning rate to {new_lr}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0
        self.epoch += 1
