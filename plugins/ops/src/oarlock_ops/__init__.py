"""oarlock-ops: the standard operator families, each kernel written once against `xp`.

One module per family, each registered as its own plugin through oarlock_ops.families (the entry
points in pyproject.toml): OARLOCK_DISABLE_PLUGINS=<family> turns exactly that family off. The
framework layer built on these ops lives in oarlock-nn (layers, optimizers, AMP) and oarlock-io
(data loading).
"""
