"""oarlock.special: special functions with torch's names (logsumexp, ...), exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.special", globals())

del lazy_namespace  # keep the public namespace to what plugins export
