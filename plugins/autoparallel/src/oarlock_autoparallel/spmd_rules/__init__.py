"""The SPMD rules, one module per op family; RULES maps an op name to its rule (see base.py for the contract)."""

from oarlock_autoparallel.spmd_rules import (concat_split, cross_entropy, elementwise, embedding, flashmask, matmul,
                                             norm, reduction, reshape, softmax, transpose)

RULES = {}
for _module in (matmul, elementwise, reduction, reshape, transpose, softmax, embedding, norm, cross_entropy,
                concat_split, flashmask):
    for _names, _rule in _module.RULES.items():
        for _name in _names:
            RULES[_name] = _rule
