"""oarlock-hapi: Paddle 3.2's high-level API on oarlock.

- `oarlock.Model` (also `oarlock.hapi.Model`): prepare / fit / evaluate / predict / train_batch / eval_batch /
  predict_batch / save / load / parameters / summary, with Paddle's logs, return values and files;
- `oarlock.callbacks` (also `oarlock.hapi.callbacks`): Callback, ProgBarLogger, ModelCheckpoint, EarlyStopping,
  LRScheduler, ReduceLROnPlateau, VisualDL (TensorBoard event files through oarlock.utils.tensorboard),
  WandbCallback (needs the wandb package);
- `oarlock.metric`: Metric, Accuracy, Precision, Recall, Auc and the accuracy function."""

from oarlock_hapi import callbacks, metrics
from oarlock_hapi.accuracy import accuracy
from oarlock_hapi.model import Model

CALLBACKS = ("Callback", "ProgBarLogger", "ModelCheckpoint", "VisualDL", "LRScheduler", "EarlyStopping",
             "ReduceLROnPlateau", "WandbCallback")
METRICS = ("Metric", "Accuracy", "Precision", "Recall", "Auc")


def register_api(api):
    api.namespace("oarlock.metric", doc="Metrics for oarlock.Model (Paddle 3.2's paddle.metric): Metric, Accuracy, "
                                        "Precision, Recall, Auc, accuracy.")
    for name in METRICS:
        api.export("oarlock.metric", name, getattr(metrics, name))
    api.export("oarlock.metric", "accuracy", accuracy)
    api.namespace("oarlock.callbacks", doc="Callbacks for oarlock.Model's fit/evaluate/predict (Paddle 3.2's "
                                           "paddle.callbacks).")
    api.namespace("oarlock.hapi", doc="Paddle 3.2's high-level API: Model and its callbacks.")
    api.namespace("oarlock.hapi.callbacks", doc="The same callbacks as oarlock.callbacks (paddle.hapi.callbacks).")
    for name in CALLBACKS:
        api.export("oarlock.callbacks", name, getattr(callbacks, name))
        api.export("oarlock.hapi.callbacks", name, getattr(callbacks, name))
    api.export("oarlock", "Model", Model)
    api.export("oarlock.hapi", "Model", Model)


__all__ = ["Model", "accuracy", "callbacks", "metrics", "register_api"]
