"""Lazy access to the ops the core itself relies on (operators, casts, grad seeds).

`_ops.add` resolves the public callable `oarlock.add` from the registry on
first use and caches it as a module attribute, so Tensor's Python operators
cost one attribute lookup after the first call.
"""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    from oarlock.registry import default_registry
    entry = default_registry().api["oarlock"].get(name)
    if entry is None:
        from oarlock._namespace import disabled_provider
        provider = disabled_provider("oarlock", name)
        if provider is not None:
            raise NotImplementedError(f"the core needs op {name!r}, but oarlock.{name} is provided by plugin "
                                      f"{provider!r}, which is disabled by OARLOCK_DISABLE_PLUGINS")
        raise NotImplementedError(f"the core needs op {name!r}, but no installed plugin provides "
                                  f"oarlock.{name}; install oarlock-ops (pip install -e plugins/ops)")
    globals()[name] = entry[0]
    return entry[0]


def forget():
    """Drop cached ops (after the registry changed)."""
    for key in [k for k in globals() if not k.startswith("_") and k != "forget"]:
        del globals()[key]
