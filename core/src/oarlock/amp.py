"""oarlock.amp: automatic mixed precision (auto_cast, decorate, GradScaler), exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.amp", globals())

del lazy_namespace  # keep the public namespace to what plugins export
