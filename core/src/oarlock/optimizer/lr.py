"""oarlock.optimizer.lr: learning-rate schedulers, exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.optimizer.lr", globals())

del lazy_namespace  # keep the public namespace to what plugins export
