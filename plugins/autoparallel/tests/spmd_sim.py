"""A one-process simulator of an SPMD rule on a mesh (the oracle of test_spmd_rules): every mesh coordinate gets
its numpy slice of each input as the rule requires it (Paddle's split rule: ceil-sized chunks, mesh dims of a
co-sharded dim outer first; Partial inputs as random addends), the op runs on each coordinate's pieces, and the
pieces are put back together as the rule's output Specs say (shards placed, Partial reduced). The result must
equal the op on the full tensors."""

from __future__ import annotations

import itertools

import numpy as np

import oarlock
from oarlock.dispatch import apply

from oarlock_autoparallel import spmd
from oarlock_autoparallel.spmd_rules.base import Spec

_REDUCE = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def chunk(size, parts, index):
    c = -(-size // parts) if parts else 0
    return min(index * c, size), min((index + 1) * c, size)


def slices(spec: Spec, coord):
    out = []
    for d, ms in enumerate(spec.dims):
        idx, parts = 0, 1
        for m in ms:                                  # outer first
            idx, parts = idx * spec.mesh_shape[m] + coord[m], parts * spec.mesh_shape[m]
        lo, hi = chunk(spec.shape[d], parts, idx)
        out.append(slice(lo, hi))
    return tuple(out)


def local_piece(full, spec: Spec, coord, rng):
    piece = np.asarray(full)[slices(spec, coord)].copy()
    for m, _ in spec.partial:                     # Partial(sum): this coordinate's addend
        n = spec.mesh_shape[m]
        noise = np.random.default_rng(hash((m, tuple(spec.shape))) % 2**32).standard_normal(piece.shape)
        noise = noise.astype(piece.dtype)
        piece = piece - (n - 1) * noise if coord[m] == 0 else noise
    return piece


def assemble(pieces: dict, spec: Spec):
    """The global array from every coordinate's piece of an output of `spec`."""
    partial = dict(spec.partial)
    out = np.full(spec.shape, np.nan, dtype=np.float64)
    groups = {}
    for coord, piece in pieces.items():
        key = tuple(c if m not in partial else None for m, c in enumerate(coord))
        groups.setdefault(key, []).append(np.asarray(piece, dtype=np.float64))
    for key, ps in groups.items():
        value = ps[0]
        if partial:
            kinds = set(partial.values())
            assert len(kinds) == 1, f"mixed Partial kinds {kinds}"
            value = _REDUCE[kinds.pop()](np.stack(ps), axis=0)
        coord = tuple(0 if c is None else c for c in key)
        sl = slices(spec, coord)
        prev = out[sl]
        if not np.all(np.isnan(prev)):
            np.testing.assert_allclose(prev, value, rtol=1e-5, atol=1e-6, err_msg="replicas disagree")
        out[sl] = value
    assert not np.isnan(out).any(), "the output pieces do not cover the global tensor"
    return out


def run(op_name, inputs, specs, attrs, mesh_shape):
    """(the assembled outputs, the full outputs, the RuleResult) of op `op_name` on numpy `inputs` placed as
    `specs` (None for an absent optional input; lists for a TensorList)."""
    op = oarlock.matmul.opdef.registry.ops[op_name]
    result = spmd.get_rule(op_name)(specs, spmd._attrs(op, attrs))
    rng = np.random.default_rng(0)

    def tensors(values, wants, coord):
        out = []
        for v, w in zip(values, wants):
            if v is None or not isinstance(w, (Spec, list)):
                out.append(v if not isinstance(v, np.ndarray) else oarlock.to_tensor(v))
            elif isinstance(w, list):
                out.append([oarlock.to_tensor(local_piece(x, s, coord, rng)) for x, s in zip(v, w)])
            else:
                out.append(oarlock.to_tensor(local_piece(v, w, coord, rng)))
        return out

    full_args = [oarlock.to_tensor(v) if isinstance(v, np.ndarray) else
                 [oarlock.to_tensor(x) for x in v] if isinstance(v, list) else v for v in inputs]
    full = apply(op, tuple(full_args), attrs)
    full = list(full) if isinstance(full, (list, tuple)) else [full]
    per_coord = {}
    for coord in itertools.product(*[range(n) for n in mesh_shape]):
        local = {**attrs, **result.local_attrs(coord)} if result.local_attrs else attrs
        out = apply(op, tuple(tensors(inputs, result.inputs, coord)), local)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        for i, factor in (result.scale or {}).items():
            out[i] = oarlock.scale(out[i], factor)
        per_coord[coord] = out
    assembled = []
    for i, s in enumerate(result.outputs):
        assert list(s.shape) == list(full[i].shape), f"rule's global shape {s.shape} != {full[i].shape}"
        assert s.valid(), f"rule output {s} is not expressible with placements"
        assembled.append(assemble({c: o[i].numpy() for c, o in per_coord.items()}, s))
    return assembled, [f.numpy() for f in full], result
