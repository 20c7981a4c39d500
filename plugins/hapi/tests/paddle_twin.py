"""Helpers for running the same hapi program on real Paddle 3.2 (the oracle) and on oarlock.

`lenet_module()` loads Paddle's own paddle/vision/models/lenet.py from the installed wheel with `paddle` aliased
to oarlock (no edit of the source); `Recorder` callbacks (one class per framework) keep every log a run gives
to its callbacks, copied; `log_lines` parses the progress lines both print so they can be compared."""

from __future__ import annotations

import copy
import importlib.util
import os
import re

import paddle  # the real Paddle 3.2, imported before any alias is switched on

from oarlock.compat import paddle_alias


def lenet_module():
    """Paddle's lenet.py, executed with `import paddle` giving oarlock."""
    path = os.path.join(os.path.dirname(paddle.__file__), "vision", "models", "lenet.py")
    with paddle_alias():
        spec = importlib.util.spec_from_file_location("paddle_source_lenet", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def recorder_class(base):
    """A Callback subclass of `base` that records (hook, step or epoch, logs) for every hook with logs."""

    class Recorder(base):
        def __init__(self):
            super().__init__()
            self.events = []
            self.lrs = []

        def _keep(self, hook, index, logs):
            kept = {k: copy.deepcopy(v) for k, v in (logs or {}).items()}
            self.events.append((hook, index, kept))

        def on_train_batch_end(self, step, logs=None):
            self._keep("train_batch", step, logs)
            self.lrs.append(float(self.model._optimizer.get_lr()))

        def on_epoch_end(self, epoch, logs=None):
            self._keep("epoch", epoch, logs)

        def on_eval_end(self, logs=None):
            self._keep("eval", None, logs)

        def on_train_end(self, logs=None):
            self._keep("train_end", None, {})

        def of(self, hook):
            return [e for e in self.events if e[0] == hook]

    return Recorder


_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?")
_RATE = re.compile(r" - \d+(?:s|ms|us)/step")


def log_lines(text: str):
    """Progress output as [(line with numbers replaced by '#', [numbers])], timings removed."""
    out = []
    for line in text.splitlines():
        line = _RATE.sub("", line)
        out.append((_NUMBER.sub("#", line), [float(x) for x in _NUMBER.findall(line)]))
    return out
