"""oarlock.compat: the torch-style functions Paddle 3.2 documents, exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.compat", globals())

del lazy_namespace  # keep the public namespace to what plugins export
