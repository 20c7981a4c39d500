"""Entry point of oarlock-ops: each family module registers its ops, kernels and rules."""

from oarlock import hookimpl

from oarlock_ops import creation, elementwise, reduction

FAMILIES = (creation, elementwise, reduction)


@hookimpl
def oarlock_register_ops(ops):
    for family in FAMILIES:
        family.register(ops)
