"""flashmask_attention_op(query [B, Sq, Hq, D], key / value [B, Sk, Hk, D], startend_row_indices [B, Hm, Sk, n]):
sharded over batch and heads only (the sequence and head dims are whole on every rank). The heads keep their
sharding when its degree divides Hq and Hk (a rank then holds query heads whose key heads, Hq/Hk per key head,
are local) and the mask's heads are 1 (replicated) or also divisible. Outputs: out like query, lse [B, Hq, Sq],
seed_offset [2] replicated."""

from oarlock_autoparallel.spmd_rules.base import RuleResult


def flashmask_rule(specs, attrs):
    q, k, v, mask, seed = specs
    batch = next((s.dims[0] for s in (q, k, v) if s.dims[0]), ())
    heads = tuple(m for m in next((s.dims[2] for s in (q, k, v) if s.dims[2]), ()) if m not in batch)
    deg = q.degree(heads)
    if q.shape[2] % deg or k.shape[2] % deg or (mask is not None and mask.shape[1] not in (1,) and
                                                   mask.shape[1] % deg):
        heads = ()
    qkv = [s.with_(dims=[batch, (), heads, ()], partial={}) for s in (q, k, v)]
    mi = None if mask is None else mask.with_(dims=[batch, heads if mask.shape[1] != 1 else (), (), ()],
                                             partial={})
    si = None if seed is None else seed.with_(dims=[()] * seed.ndim, partial={})
    out = qkv[0]
    lse = q.with_(shape=[q.shape[0], q.shape[2], q.shape[1]], dims=[batch, heads, ()], partial={})
    seed_out = q.with_(shape=[2], dims=[()], partial={})
    return RuleResult(qkv + [mi, si], [out, lse, seed_out])


RULES = {("flashmask_attention_op",): flashmask_rule}
