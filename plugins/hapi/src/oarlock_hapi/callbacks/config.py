"""config_callbacks: the CallbackList fit/evaluate/predict run: the given callbacks plus, as Paddle adds them, a
ProgBarLogger first when verbose, a ModelCheckpoint and an LRScheduler last when the list has none."""

from __future__ import annotations

from oarlock_hapi.callbacks.base import CallbackList, as_callback_list
from oarlock_hapi.callbacks.checkpoint import ModelCheckpoint
from oarlock_hapi.callbacks.early_stopping import EarlyStopping
from oarlock_hapi.callbacks.lr import LRScheduler
from oarlock_hapi.callbacks.progress import ProgBarLogger


def config_callbacks(callbacks=None, model=None, batch_size=None, epochs=None, steps=None, log_freq=2, verbose=2,
                     save_freq=1, save_dir=None, metrics=None, mode="train", owner="config_callbacks()"):
    """The CallbackList a run uses, with Paddle's defaults added and params set."""
    cbks = as_callback_list(owner, callbacks)
    if verbose and not any(isinstance(k, ProgBarLogger) for k in cbks):
        cbks = [ProgBarLogger(log_freq, verbose=verbose), *cbks]
    if not any(isinstance(k, ModelCheckpoint) for k in cbks):
        cbks = [*cbks, ModelCheckpoint(save_freq, save_dir)]
    for k in cbks:
        if isinstance(k, EarlyStopping):
            k.save_dir = save_dir
    if not any(isinstance(k, LRScheduler) for k in cbks):
        cbks = [*cbks, LRScheduler()]
    cbk_list = CallbackList(cbks)
    cbk_list.set_model(model)
    cbk_list.set_params({"batch_size": batch_size, "epochs": epochs, "steps": steps, "verbose": verbose,
                         "metrics": (metrics or []) if mode != "test" else []})
    return cbk_list
