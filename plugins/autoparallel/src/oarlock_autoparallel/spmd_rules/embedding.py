"""embedding(ids, weight [vocab, hidden]): the output [*ids, hidden] takes the ids' sharding and the weight's
hidden-dim sharding. A weight sharded over the vocabulary is gathered (the local kernel cannot look up ids
outside its rows); ids are integers, never Partial."""

from oarlock_autoparallel.spmd_rules.base import RuleResult


def embedding_rule(specs, attrs):
    ids, w = specs[0], specs[1]
    hidden = tuple(m for m in w.dims[1] if m not in ids.used())
    wi = w.with_(dims=[(), hidden], partial={})
    ii = ids.unpartial()
    out = ii.with_(shape=list(ids.shape) + [w.shape[1]], dims=list(ii.dims) + [hidden])
    return RuleResult([ii, wi] + list(specs[2:]), [out])


RULES = {("embedding",): embedding_rule}
