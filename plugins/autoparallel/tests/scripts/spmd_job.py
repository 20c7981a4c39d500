"""A 4-rank job for tests/test_spmd_dist.py (`oarlock launch -n 4 spmd_job.py OUT`): ops on DistTensors.

Each case runs an op (its public function) on distributed inputs laid out on the 1-d mesh [0, 1, 2, 3] or the
2-d mesh [[0, 1], [2, 3]] and on the same inputs as plain tensors in this process: the unsharded result
(unshard_dtensor) must equal the plain result, the output placements must be the ones the op's rule claims,
and this rank's piece must be numpy's slice of the plain result (Paddle's split rule). Partial inputs come
from a matmul over a sharded contracted dim. Gradients: a dp x mp two-layer MLP's parameter gradients equal the
one-process ones. Bad input: inputs on different meshes fail on every rank with a clear error.
Rank 0 writes {"size", "cases", "failures": {check: [...]}} as JSON to OUT.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn.functional as F

COMM = MPI.COMM_WORLD
RANK = COMM.rank
R, S0, S1, S2, P = dist.Replicate(), dist.Shard(0), dist.Shard(1), dist.Shard(2), dist.Partial()
MESH1 = dist.ProcessMesh([0, 1, 2, 3], dim_names=["x"])
MESH2 = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
RNG = np.random.default_rng(7)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def expected_piece(whole, mesh, placements):
    coord = [int(i) for i in np.argwhere(mesh.mesh == RANK)[0]]
    piece = whole
    for axis, p in enumerate(placements):
        if p.is_shard():
            d, n = p.get_dim(), mesh.shape[axis]
            chunk = -(-piece.shape[d] // n)
            index = [slice(None)] * piece.ndim
            index[d] = slice(coord[axis] * chunk, (coord[axis] + 1) * chunk)
            piece = piece[tuple(index)]
    return piece


def claimed(op_name, args, attrs):
    """The output placements the op's rule claims for these distributed arguments."""
    from oarlock_autoparallel import spmd
    op = oarlock.matmul.opdef.registry.ops[op_name]
    mesh = next(a for a in _flat(args) if isinstance(a, oarlock.Tensor) and a.is_dist()).process_mesh

    def spec(a):
        if isinstance(a, list):
            return [spec(x) for x in a]
        if isinstance(a, oarlock.Tensor):
            return spmd.spec_of(a.shape, mesh, a.placements) if a.is_dist() else \
                spmd.Spec.replicated(a.shape, mesh.shape)
        return a
    result = spmd.get_rule(op_name)([spec(a) for a in args], spmd._attrs(op, attrs))
    return None if result.outputs is None else [spmd.placements_of(s) for s in result.outputs]


def _flat(args):
    for a in args:
        yield from (a if isinstance(a, list) else [a])


def placed(value, mesh, placements):
    """A DistTensor of numpy `value`; with P among the placements it is made Partial by a matmul with a
    contracted dim sharded over that mesh dim (the way Partial arises)."""
    if not any(p.is_partial() for p in placements):
        return dist.shard_tensor(oarlock.to_tensor(value), mesh, placements)
    axis = next(a for a, p in enumerate(placements) if p.is_partial())
    n = mesh.shape[axis]
    eye = np.tile(np.eye(value.shape[-1], dtype=np.float32), (n, 1))
    # value = (value tiled over n blocks / n) @ stacked identities: contracted dim n * last, sharded on `axis`
    left = np.concatenate([value / n] * n, axis=-1).astype(np.float32)
    lp = [S1 if a == axis else (p if not p.is_partial() else R) for a, p in enumerate(placements)]
    lp = [dist.Shard(value.ndim - 1) if a == axis else p for a, p in enumerate(lp)]
    rp = [S0 if a == axis else R for a in range(mesh.ndim)]
    out = oarlock.matmul(dist.shard_tensor(oarlock.to_tensor(left), mesh, lp),
                         dist.shard_tensor(oarlock.to_tensor(eye), mesh, rp))
    assert out.placements[axis].is_partial(), f"matmul did not give Partial: {out.placements}"
    return out


CASES = []


def case(name, fn, op_name, inputs, layouts, mesh=MESH2, attrs=None, tol=1e-5):
    CASES.append((name, fn, op_name, inputs, layouts, mesh, attrs or {}, tol))


def build_cases():
    x, y = f32(8, 12), f32(12, 6)
    for lx, ly in [([S0, R], [R, S1]), ([S1, R], [S0, R]), ([R, S1], [S0, R]), ([S0, S1], [S1, R]),
                   ([S0, S0], [R, R]), ([R, R], [R, S1]), ([P, R], [R, R])]:
        case(f"matmul {lx} {ly}", oarlock.matmul, "matmul", [x, y], [lx, ly])
    case("matmul 1d S1 S0 -> P", oarlock.matmul, "matmul", [x, y], [[S1], [S0]], MESH1)
    a, b = f32(4, 6, 8), f32(6, 1)
    for op in ("add", "multiply", "subtract"):
        case(f"{op} broadcast", getattr(oarlock, op), op, [a, b], [[S0, S1], [S0, R]])
    case("add P+P", oarlock.add, "add", [f32(4, 8), f32(4, 8)], [[P, S0], [P, S0]])
    for op in ("sum", "mean", "max"):
        case(f"{op} axis 2", lambda t, o=op: getattr(oarlock, o)(t, axis=2), op, [a], [[S0, S2]], attrs={"axis": 2})
        case(f"{op} all", getattr(oarlock, op), op, [a], [[S1, S2]])
    case("reshape co-sharded split", lambda t: oarlock.reshape(t, [2, 4, 3]), "reshape", [f32(8, 3)], [[S0, S0]],
         attrs={"shape": [2, 4, 3]})
    case("reshape merge", lambda t: oarlock.reshape(t, [4, 48]), "reshape", [a], [[S0, S1]], attrs={"shape": [4, 48]})
    case("transpose", lambda t: oarlock.transpose(t, [2, 0, 1]), "transpose", [a], [[S0, S2]],
         attrs={"perm": [2, 0, 1]})
    case("softmax", lambda t: F.softmax(t, axis=-1), "softmax", [a], [[S0, S2]], attrs={"axis": -1})
    ids = RNG.integers(0, 10, (4, 6)).astype(np.int64)
    case("embedding", F.embedding, "embedding", [ids, f32(10, 8)], [[S0, R], [R, S1]])
    w, bias = f32(8), f32(8)
    case("layer_norm", lambda t, w_, b_: F.layer_norm(t, [8], w_, b_), "layer_norm", [a, w, bias],
         [[S0, S1], [R, R], [R, R]], attrs={"normalized_shape": [8]})
    case("rms_norm", lambda t, w_: F.rms_norm(t, [8], w_), "rms_norm", [a, w], [[S0, S1], [R, S0]],
         attrs={"normalized_shape": [8]})
    logits, labels = f32(4, 6, 10), RNG.integers(0, 10, (4, 6, 1)).astype(np.int64)
    for red in ("none", "sum", "mean"):
        case(f"cross_entropy {red}", lambda t, lab, r=red: F.cross_entropy(t, lab, reduction=r), "cross_entropy",
             [logits, labels], [[S0, S1], [S0, R]], attrs={"reduction": red})
    case("concat", lambda u, v: oarlock.concat([u, v], axis=1), "concat", [f32(4, 6), f32(4, 2)],
         [[S0, S1], [R, R]], attrs={"axis": 1})
    case("split", lambda u: oarlock.split(u, [2, 4], axis=1), "split", [f32(4, 6)], [[S0, S1]],
         attrs={"num_or_sections": [2, 4], "axis": 1})
    case("fallback cumsum", lambda u: oarlock.cumsum(u, axis=1), "cumsum", [f32(8, 6)], [[S0, S1]])
    q, k, v = f32(2, 8, 4, 16), f32(2, 8, 2, 16), f32(2, 8, 2, 16)
    case("flashmask batch x heads", lambda q_, k_, v_: F.flashmask_attention(q_, k_, v_, causal=True),
         "flashmask_attention_op", [q, k, v], [[S0, S2], [S0, S2], [R, S2]], tol=1e-4, attrs={"causal": True})


def run_case(failures, name, fn, op_name, inputs, layouts, mesh, attrs, tol):
    plain = [oarlock.to_tensor(v) for v in inputs]
    want = fn(*plain)
    dins = [placed(v, mesh, p) for v, p in zip(inputs, layouts)]
    got = fn(*dins)
    wants = list(want) if isinstance(want, (list, tuple)) else [want]
    gots = list(got) if isinstance(got, (list, tuple)) else [got]
    margs = dins if op_name != "concat" else [dins]
    if op_name == "flashmask_attention_op":
        margs = dins + [None, None]
    claim = claimed(op_name, margs, attrs)
    for i, (g, w) in enumerate(zip(gots, wants)):
        if not g.is_dist():
            failures.append(f"{name}: output {i} is not distributed")
            continue
        if claim is not None and list(g.placements) != claim[i]:
            failures.append(f"{name}: output {i} placements {g.placements}, the rule claims {claim[i]}")
        full = dist.unshard_dtensor(g).numpy()
        if not np.allclose(full, w.numpy(), rtol=tol, atol=tol):
            failures.append(f"{name}: output {i} differs from the plain result by "
                            f"{np.abs(full - w.numpy()).max():.3g}")
        if not any(p.is_partial() for p in g.placements):
            piece = expected_piece(w.numpy(), mesh, g.placements)
            if g._local_value().shape != list(piece.shape) or not np.allclose(g._local_value().numpy(), piece,
                                                                               rtol=tol, atol=tol):
                failures.append(f"{name}: output {i}'s local piece is not the slice of the plain result")


def check_ops(failures):
    build_cases()
    for c in CASES:
        try:
            run_case(failures, *c)
        except Exception:
            failures.append(f"{c[0]}: {traceback.format_exc(limit=4)}")


def check_gradients(failures):
    """A two-layer MLP, x sharded over dp, fc1 column- and fc2 row-parallel over mp: the loss and every
    parameter gradient (unsharded) equal one process's."""
    x, w1, b1, w2, b2 = f32(8, 6), f32(6, 12), f32(12), f32(12, 6), f32(6)
    params = [oarlock.to_tensor(v, stop_gradient=False) for v in (w1, b1, w2, b2)]

    def forward(xt, ps):
        h = F.gelu(F.linear(xt, ps[0], ps[1]))
        return oarlock.mean(F.linear(h, ps[2], ps[3]) ** 2)
    loss = forward(oarlock.to_tensor(x), params)
    loss.backward()
    layouts = [[R, S1], [R, S0], [R, S0], [R, R]]
    dps = [dist.shard_tensor(oarlock.to_tensor(v, stop_gradient=False), MESH2, p)
           for v, p in zip((w1, b1, w2, b2), layouts)]
    for d in dps:
        d.stop_gradient = False
    dloss = forward(dist.shard_tensor(oarlock.to_tensor(x), MESH2, [S0, R]), dps)
    dloss.backward()
    got = float(dist.unshard_dtensor(dloss).numpy())
    if abs(got - float(loss.numpy())) > 1e-5 * abs(float(loss.numpy())):
        failures.append(f"MLP loss {got} != one process {float(loss.numpy())}")
    for name, d, p, lay in zip(("w1", "b1", "w2", "b2"), dps, params, layouts):
        g = d.grad
        want = expected_piece(p.grad.numpy(), MESH2, lay)
        if g is None or not np.allclose(g.numpy(), want, rtol=1e-5, atol=1e-6):
            failures.append(f"MLP grad of {name} ({lay}): local {None if g is None else g.numpy().ravel()[:4]} != "
                            f"{want.ravel()[:4]}")


def check_bad_input(failures):
    other = dist.ProcessMesh([[0, 2], [1, 3]], dim_names=["dp", "mp"])
    a = dist.shard_tensor(oarlock.to_tensor(f32(4, 4)), MESH2, [S0, R])
    b = dist.shard_tensor(oarlock.to_tensor(f32(4, 4)), other, [S0, R])
    try:
        oarlock.add(a, b)
        failures.append("add on two meshes did not raise")
    except ValueError as e:
        if "different meshes" not in str(e) or "add" not in str(e):
            failures.append(f"unclear error for two meshes: {e}")


CHECKS = [check_ops, check_gradients, check_bad_input]


def main(out):
    failures = {}
    for chk in CHECKS:
        mine = []
        try:
            chk(mine)
        except Exception:
            mine.append(traceback.format_exc(limit=6))
        everyone = COMM.gather(mine, root=0)
        if RANK == 0:
            failures[chk.__name__] = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
    if RANK == 0:
        with open(out, "w") as f:
            json.dump({"size": COMM.size, "cases": len(CASES), "failures": failures}, f)


if __name__ == "__main__":
    main(sys.argv[1])
