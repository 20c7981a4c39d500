"""oarlock.distributed: collective communication and process groups, exported by plugins (oarlock-xccl)."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.distributed", globals())

del lazy_namespace  # keep the public namespace to what plugins export
