"""Public namespaces filled from the registry: module `__getattr__` and `__dir__` factories.

`oarlock.relu`, `oarlock.nn.functional.relu` and `oarlock.linalg.norm` are
resolved on first access from what plugins exported, then cached in the
module's globals so the next access is an ordinary attribute lookup.
"""

from __future__ import annotations


def lazy_namespace(module_name: str, namespace: str, module_globals: dict):
    """Return (__getattr__, __dir__) for a module that exposes registry namespace `namespace`."""

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        from oarlock.registry import default_registry
        entry = default_registry().api[namespace].get(name)
        if entry is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}: no installed plugin "
                                 f"exports {namespace}.{name} (see `oarlock plugins`)")
        module_globals[name] = entry[0]
        return entry[0]

    def __dir__():
        from oarlock.registry import default_registry
        return sorted(set(module_globals) | set(default_registry().api[namespace]))

    return __getattr__, __dir__
