"""Callback (the hooks Model calls) and CallbackList (calls each of a list in turn)."""

from __future__ import annotations

MODES = ("train", "eval", "predict")


class Callback:
    """Base class of callbacks: every hook does nothing. `self.model` is the Model being run, `self.params` a
    dict with batch_size, epochs, steps, verbose and metrics (the log keys)."""

    def __init__(self) -> None:
        self.model = None
        self.params = {}

    def set_params(self, params) -> None:
        self.params = params

    def set_model(self, model) -> None:
        self.model = model

    def on_train_begin(self, logs=None) -> None:
        """Called once when fit starts."""

    def on_train_end(self, logs=None) -> None:
        """Called once when fit ends; logs are the last epoch's."""

    def on_eval_begin(self, logs=None) -> None:
        """Called when an evaluation starts; logs has 'steps' and 'metrics'."""

    def on_eval_end(self, logs=None) -> None:
        """Called when an evaluation ends; logs has the loss of its last batch and the accumulated metrics."""

    def on_predict_begin(self, logs=None) -> None:
        """Called when predict starts; logs has 'steps'."""

    def on_predict_end(self, logs=None) -> None:
        """Called when predict ends."""

    def on_epoch_begin(self, epoch, logs=None) -> None:
        """Called at the start of each training epoch (0-based)."""

    def on_epoch_end(self, epoch, logs=None) -> None:
        """Called at the end of each training epoch with its logs (last batch's loss, accumulated metrics)."""

    def on_train_batch_begin(self, step, logs=None) -> None:
        """Called before each training batch."""

    def on_train_batch_end(self, step, logs=None) -> None:
        """Called after each training batch with logs: loss, metrics, step, batch_size."""

    def on_eval_batch_begin(self, step, logs=None) -> None:
        """Called before each evaluation batch."""

    def on_eval_batch_end(self, step, logs=None) -> None:
        """Called after each evaluation batch."""

    def on_predict_batch_begin(self, step, logs=None) -> None:
        """Called before each prediction batch."""

    def on_predict_batch_end(self, step, logs=None) -> None:
        """Called after each prediction batch."""


def check_mode(owner: str, mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"{owner}: argument 'mode' must be one of {', '.join(MODES)}, got {mode!r}")


class CallbackList:
    """Runs each hook on every callback of the list, in order."""

    def __init__(self, callbacks=None) -> None:
        if callbacks is None:
            raise TypeError("CallbackList(): argument 'callbacks' must be a list of Callback, got None")
        self.callbacks = list(callbacks)
        self.params = {}
        self.model = None

    def append(self, callback) -> None:
        self.callbacks.append(callback)

    def __iter__(self):
        return iter(self.callbacks)

    def set_params(self, params) -> None:
        for c in self.callbacks:
            c.set_params(params)

    def set_model(self, model) -> None:
        for c in self.callbacks:
            c.set_model(model)

    def _call(self, name, *args) -> None:
        for c in self.callbacks:
            getattr(c, name)(*args)

    def on_begin(self, mode, logs=None) -> None:
        check_mode("CallbackList.on_begin()", mode)
        self._call(f"on_{mode}_begin", logs)

    def on_end(self, mode, logs=None) -> None:
        check_mode("CallbackList.on_end()", mode)
        self._call(f"on_{mode}_end", logs)

    def on_epoch_begin(self, epoch=None, logs=None) -> None:
        self._call("on_epoch_begin", epoch, logs)

    def on_epoch_end(self, epoch=None, logs=None) -> None:
        self._call("on_epoch_end", epoch, logs)

    def on_batch_begin(self, mode, step=None, logs=None) -> None:
        check_mode("CallbackList.on_batch_begin()", mode)
        self._call(f"on_{mode}_batch_begin", step, logs)

    def on_batch_end(self, mode, step=None, logs=None) -> None:
        check_mode("CallbackList.on_batch_end()", mode)
        self._call(f"on_{mode}_batch_end", step, logs)


def as_callback_list(owner: str, callbacks) -> list:
    """The callbacks argument of fit/evaluate/predict as a list, each checked to be a Callback."""
    given = callbacks or []
    given = list(given if isinstance(given, (list, tuple)) else [given])
    for i, c in enumerate(given):
        if not isinstance(c, Callback):
            raise TypeError(f"{owner}: argument 'callbacks' must be a Callback or a list of Callback, "
                            f"got {type(c).__name__} at position {i}")
    return given
