"""oarlock.nn.init: torch-style in-place initializers (kaiming_uniform_, xavier_normal_, ...), exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.nn.init", globals())

del lazy_namespace  # keep the public namespace to what plugins export
