"""oarlock.nn.functional: stateless neural-network functions, exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.nn.functional", globals())

del lazy_namespace  # keep the public namespace to what plugins export
