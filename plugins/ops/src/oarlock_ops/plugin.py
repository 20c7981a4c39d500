"""Entry point of oarlock-ops: each family module registers its ops, kernels and rules."""

from oarlock import hookimpl

from oarlock_ops import (amp, attention, compat, complex, conv, creation, data, elementwise, indexing, layers, linalg,
                         loss, matrix, nn, norm, optim, reduction, rotary, sampling, scatter, shape, sorting,
                         tensor_api, unary)

FAMILIES = (creation, elementwise, unary, reduction, shape, indexing, linalg, nn, conv, norm, attention, loss, optim,
            sorting, scatter, complex, matrix, sampling, tensor_api, rotary)


@hookimpl
def oarlock_register_ops(ops):
    for family in FAMILIES:
        family.register(ops)


# Python-level APIs (layers, optimizers, data) export their classes into public namespaces.
API_MODULES = (layers, optim, data, compat, creation, tensor_api, amp, sorting, complex)


@hookimpl
def oarlock_register_api(api):
    for module in API_MODULES:
        module.register_api(api)
