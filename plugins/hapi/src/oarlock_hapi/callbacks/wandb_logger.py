"""WandbCallback: log training and evaluation scalars to Weights & Biases, as Paddle 3.2's WandbCallback does.

The `wandb` package is imported when the callback is created (it is not a dependency of oarlock-hapi: install
it with `pip install wandb` to use this callback). Training values go to `train/<name>` against `train/step`
after every batch, evaluation values to `eval/<name>` against `epoch`; only local rank 0 logs."""

from __future__ import annotations

import importlib
import numbers
import warnings

from oarlock_hapi.callbacks.step_logger import StepLogger


class WandbCallback(StepLogger):
    """Logs to a wandb run made with wandb.init(project=, entity=, name=, dir=, mode=, job_type=, **kwargs), or
    the run already in progress."""

    def __init__(self, project=None, entity=None, name=None, dir=None, mode=None, job_type=None, **kwargs):
        super().__init__()
        try:
            self.wandb = importlib.import_module("wandb")
        except ImportError:
            raise ImportError("WandbCallback(): You want to use `wandb` which is not installed yet install it with "
                              "`pip install wandb`") from None
        self.wandb_args = {"project": project, "name": name, "entity": entity, "dir": dir, "mode": mode,
                           "job_type": job_type, **kwargs}
        self._run = None
        _ = self.run

    @property
    def run(self):
        if self._is_write() and self._run is None:
            if self.wandb.run is not None:
                warnings.warn("There is a wandb run already in progress and newly created instances of "
                              "`WandbCallback` will reuse this run. If this is not desired , call `wandb.finish()` "
                              "before instantiating `WandbCallback`.", stacklevel=2)
                self._run = self.wandb.run
            else:
                self._run = self.wandb.init(**self.wandb_args)
        return self._run

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self._is_write():
            self.run.define_metric("train/step")
            self.run.define_metric("train/*", step_metric="train/step")
            self.run.define_metric("epoch")
            self.run.define_metric("eval/*", step_metric="epoch")

    def _updates(self, logs, mode):
        if not self._is_write():
            return
        if mode == "train":
            values = {"train/step": self.train_step}
        else:
            values = {"epoch": getattr(self, "epoch", 0)}
        for k in getattr(self, f"{mode}_metrics"):
            if k not in logs:
                continue
            value = logs[k]
            if isinstance(value, (list, tuple)):
                values[f"{mode}/{k}"] = value[0]
            elif isinstance(value, numbers.Number):
                values[f"{mode}/{k}"] = value
        self.run.log(values)

    def on_train_end(self, logs=None):
        if self._is_write():
            self.run.finish()

    def on_eval_end(self, logs=None):
        if self._is_write():
            self._updates(logs or {}, "eval")
            if not getattr(self, "_is_fit", False):
                self.run.finish()
                self._run = None
