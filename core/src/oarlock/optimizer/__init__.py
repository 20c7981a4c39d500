"""oarlock.optimizer: optimizers and gradient clipping, exported by plugins."""

from oarlock._namespace import lazy_namespace
from oarlock.optimizer import lr

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.optimizer", globals())

del lazy_namespace  # keep the public namespace to what plugins export
