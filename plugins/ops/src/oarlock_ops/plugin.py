"""Entry point of oarlock-ops: each family module registers its ops, kernels and rules."""

from oarlock import hookimpl

from oarlock_ops import (attention, conv, creation, data, elementwise, indexing, layers, linalg, loss, nn, norm,
                         optim, reduction, shape, unary)

FAMILIES = (creation, elementwise, unary, reduction, shape, indexing, linalg, nn, conv, norm, attention, loss, optim)


@hookimpl
def oarlock_register_ops(ops):
    for family in FAMILIES:
        family.register(ops)


# Python-level APIs (layers, optimizers, data) export their classes into public namespaces.
API_MODULES = (layers, optim, data)


@hookimpl
def oarlock_register_api(api):
    for module in API_MODULES:
        module.register_api(api)
