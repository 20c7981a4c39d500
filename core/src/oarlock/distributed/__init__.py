"""oarlock.distributed: collective communication and process groups, exported by plugins (oarlock-xccl).

A real package (launch.py makes `python -m oarlock.distributed.launch` work); its names and child
namespaces (oarlock.distributed.fleet, ...) come from plugins like every other namespace's.
"""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, globals())

del lazy_namespace  # keep the public namespace to what plugins export
