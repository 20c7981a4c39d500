"""oarlock.nn.attention: attention mask builders (FlashMask encodings), exported by plugins."""

from oarlock._namespace import lazy_namespace

__getattr__, __dir__ = lazy_namespace(__name__, "oarlock.nn.attention", globals())

del lazy_namespace  # keep the public namespace to what plugins export
