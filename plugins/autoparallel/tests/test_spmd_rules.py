"""The SPMD rules as functions: on 1-D and 2-D meshes, each rule's input requirements and output Specs are played
out on every mesh coordinate in one process (spmd_sim: numpy slices by Paddle's split rule, Partial as addends)
and the assembled result must equal the op on the full tensors; the output placements the rules claim are
checked by name where they are the point (Partial from matmul and sum, reshape's slicing rule)."""

import os
import sys

import numpy as np
import pytest

import oarlock  # noqa: F401  (registers the ops)

from oarlock_autoparallel import spmd
from oarlock_autoparallel.spmd_rules.base import Spec
sys.path.insert(0, os.path.dirname(__file__))   # spmd_sim, the simulator next to this file
from spmd_sim import run  # noqa: E402

M1, M2 = (4,), (2, 2)
R = np.random.default_rng(1)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def S(shape, dims, mesh=M2, partial=None):
    return Spec.make(shape, dims, mesh, partial)


def check(op, inputs, specs, attrs=None, mesh=M2, rtol=1e-5):
    got, want, result = run(op, inputs, specs, attrs or {}, mesh)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-5)
    return result


# placements of both operands of x [8, 6] @ y [6, 4] on the 2x2 mesh: every (x dims, y dims) pair
XY = [((), ()), ((0,), ()), ((), (0,)), ((0, 1), ()), ((1,), (0,))]


@pytest.mark.parametrize("xd", [[a, b] for a, b in XY])
@pytest.mark.parametrize("yd", [[a, b] for a, b in XY])
def test_matmul_all_placements(xd, yd):
    check("matmul", [f32(8, 6), f32(6, 4)], [S((8, 6), xd), S((6, 4), yd)])


def test_matmul_partial_from_contracted_dim():
    res = check("matmul", [f32(8, 6), f32(6, 4)], [S((8, 6), [(), (0,)]), S((6, 4), [(0,), ()])])
    assert res.outputs[0].partial_map == {0: "sum"}
    assert res.outputs[0].dims == ((), ())
    # both operands split on k over both mesh dims: Partial on both
    res = check("matmul", [f32(8, 8), f32(8, 4)], [S((8, 8), [(), (0, 1)]), S((8, 4), [(0, 1), ()])])
    assert res.outputs[0].partial_map == {0: "sum", 1: "sum"}


def test_matmul_partial_input_stays_partial():
    res = check("matmul", [f32(8, 6), f32(6, 4)], [S((8, 6), [(1,), ()], partial={0: "sum"}), S((6, 4), [(), ()])])
    assert res.outputs[0].partial_map == {0: "sum"} and res.outputs[0].dims == ((1,), ())


@pytest.mark.parametrize("tx,ty", [(True, False), (False, True), (True, True)])
def test_matmul_transposed_batched(tx, ty):
    x = f32(3, 6, 8) if tx else f32(3, 8, 6)
    y = f32(4, 6) if ty else f32(6, 4)
    xs = S(x.shape, [(0,), (), (1,)])
    ys = S(y.shape, [(1,), ()] if not ty else [(), (1,)])
    check("matmul", [x, y], [xs, ys], {"transpose_x": tx, "transpose_y": ty})


def test_matmul_1d_mesh_and_vectors():
    check("matmul", [f32(8, 6), f32(6)], [S((8, 6), [(0,), ()], M1), S((6,), [()], M1)], mesh=M1)
    check("matmul", [f32(6), f32(6, 8)], [S((6,), [(0,)], M1), S((6, 8), [(0,), ()], M1)], mesh=M1)


def test_linear_column_and_row():
    x, w, b = f32(4, 8), f32(8, 6), f32(6)
    res = check("linear", [x, w, b], [S((4, 8), [(0,), ()]), S((8, 6), [(), (1,)]), S((6,), [(1,)])])
    assert res.outputs[0].dims == ((0,), (1,))
    res = check("linear", [x, w, None], [S((4, 8), [(), (1,)]), S((8, 6), [(1,), ()]), None])
    assert res.outputs[0].partial_map == {1: "sum"}
    res = check("linear", [x, w, b], [S((4, 8), [(), (1,)]), S((8, 6), [(1,), ()]), S((6,), [()])])
    assert res.outputs[0].partial_map == {1: "sum"} and res.inputs[2].partial_map == {1: "sum"}


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum"])
def test_elementwise_broadcasting(op):
    x, y = f32(4, 6, 8), np.abs(f32(6, 1)) + 0.5
    check(op, [x, y], [S(x.shape, [(0,), (1,), ()]), S(y.shape, [(1,), ()])])
    check(op, [x, y], [S(x.shape, [(), (), (0, 1)]), S(y.shape, [(0,), ()])])
    check(op, [y, x], [S(y.shape, [(0,), ()]), S(x.shape, [(1,), (), ()])])


def test_elementwise_partial():
    x, y = f32(4, 6), f32(4, 6)
    res = check("add", [x, y], [S(x.shape, [(1,), ()], partial={0: "sum"}), S(y.shape, [(), ()], partial={0: "sum"})])
    assert res.outputs[0].partial_map == {0: "sum"}
    res = check("multiply", [x, y], [S(x.shape, [(), ()], partial={0: "sum"}), S(y.shape, [(), (1,)])])
    assert res.outputs[0].partial_map == {0: "sum"}
    res = check("add", [x, y], [S(x.shape, [(), ()], partial={0: "sum"}), S(y.shape, [(), ()])])
    assert not res.outputs[0].partial      # P + R: resolved first
    res = check("relu", [x], [S(x.shape, [(0,), ()], partial={1: "sum"})])
    assert not res.outputs[0].partial
    res = check("scale", [x], [S(x.shape, [(0,), ()], partial={1: "sum"})], {"scale": 2.0})
    assert res.outputs[0].partial_map == {1: "sum"}


@pytest.mark.parametrize("op,kind", [("sum", "sum"), ("mean", "sum"), ("max", "max")])
def test_reductions(op, kind):
    x = f32(4, 6, 8)
    res = check(op, [x], [S(x.shape, [(0,), (), (1,)])], {"axis": 2})
    assert res.outputs[0].partial_map == {1: kind} and res.outputs[0].dims == ((0,), ())
    res = check(op, [x], [S(x.shape, [(0,), (), (1,)])], {"axis": None})
    assert res.outputs[0].partial_map == {0: kind, 1: kind}
    check(op, [x], [S(x.shape, [(0, 1), (), ()])], {"axis": [0, 2], "keepdim": True})


def test_max_with_gradient_gathers():
    res = spmd.get_rule("max")([S((4, 6), [(0,), (1,)])], {"axis": 1, "__needs_grad__": True})
    assert res.inputs[0].dims == ((0,), ()) and not res.outputs[0].partial


def test_mean_uneven_is_gathered_and_sum_keeps_partial():
    x = f32(7, 5)
    res = check("mean", [x], [S(x.shape, [(0, 1), ()])], {"axis": 0})
    assert not res.outputs[0].partial
    res = check("sum", [x], [S(x.shape, [(0,), ()], partial={1: "sum"})], {"axis": 1})
    assert res.outputs[0].partial_map == {1: "sum"}


def test_reshape_slicing_rule_multi_mesh_dim_split():
    """The seed's case: a dim of 8 split by both mesh dims, reshaped to (2, 4): mesh dim 0 goes to out dim 0,
    mesh dim 1 to out dim 1 (chunk c = 2*m0 + m1 covers row c // 2, columns (c % 2) * 2 ...)."""
    x = f32(8, 3)
    res = check("reshape", [x], [S(x.shape, [(0, 1), ()])], {"shape": [2, 4, 3]})
    assert res.outputs[0].dims == ((0,), (1,), ()) and res.inputs[0].dims == ((0, 1), ())
    res = check("reshape", [x], [S(x.shape, [(0, 1), ()])], {"shape": [4, 2, 3]})
    assert res.outputs[0].dims == ((0, 1), (), ())
    res = check("reshape", [x], [S(x.shape, [(0, 1), ()])], {"shape": [1, 8, 3]})
    assert res.outputs[1 - 1].dims == ((), (0, 1), ())


@pytest.mark.parametrize("shape,dims,target", [
    ((4, 6, 8), [(0,), (1,), ()], [4, 48]),          # merge: inner shard dropped
    ((4, 6, 8), [(), (0,), (1,)], [24, 8]),
    ((4, 48), [(0,), (1,)], [4, 6, 8]),             # split keeps the shard on the outer new dim
    ((6, 4), [(0, 1), ()], [3, 2, 4]),               # uneven-for-the-walk: dropped
    ((7, 5), [(0,), ()], [7, 5, 1]),                 # uneven kept (one dim to one dim)
    ((2, 3, 4), [(0,), (), (1,)], [-1, 0]),          # -1 and 0
])
def test_reshape_cases(shape, dims, target):
    check("reshape", [f32(*shape)], [S(shape, dims)], {"shape": target})


def test_flatten_squeeze_unsqueeze_transpose():
    x = f32(4, 6, 8)
    check("flatten", [x], [S(x.shape, [(0,), (1,), ()])], {"start_axis": 1})
    check("unsqueeze", [x], [S(x.shape, [(0,), (1,), ()])], {"axis": 1})
    check("squeeze", [f32(4, 1, 8)], [S((4, 1, 8), [(0,), (), (1,)])], {"axis": 1})
    res = check("transpose", [x], [S(x.shape, [(0,), (), (1,)], partial=None)], {"perm": [2, 0, 1]})
    assert res.outputs[0].dims == ((1,), (0,), ())


def test_softmax_and_norms():
    x = f32(4, 6, 8)
    res = check("softmax", [x], [S(x.shape, [(0,), (), (1,)])], {"axis": -1})
    assert res.outputs[0].dims == ((0,), (), ())
    check("log_softmax", [x], [S(x.shape, [(), (0,), (1,)])], {"axis": 1})
    w, b = f32(8), f32(8)
    res = check("layer_norm", [x, w, b], [S(x.shape, [(0,), (1,), ()]), S((8,), [(0,)]), S((8,), [()])],
                {"normalized_shape": [8]})
    assert res.outputs[0].dims == ((0,), (1,), ())
    check("rms_norm", [x, w], [S(x.shape, [(0,), (), (1,)]), S((8,), [(1,)])], {"normalized_shape": [8]})


def test_embedding():
    ids = R.integers(0, 10, (4, 6)).astype(np.int64)
    w = f32(10, 8)
    res = check("embedding", [ids, w], [S(ids.shape, [(0,), ()]), S(w.shape, [(), (1,)])])
    assert res.outputs[0].dims == ((0,), (), (1,))
    check("embedding", [ids, w], [S(ids.shape, [(), (1,)]), S(w.shape, [(0,), ()])])


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_cross_entropy(reduction):
    x = f32(4, 6, 10)
    label = R.integers(0, 10, (4, 6, 1)).astype(np.int64)
    label[0, 0, 0] = -100
    res = check("cross_entropy", [x, label, None], [S(x.shape, [(0,), (1,), ()]), S(label.shape, [(), (), ()]), None],
                {"reduction": reduction})
    if reduction == "sum":
        assert res.outputs[0].partial_map == {0: "sum", 1: "sum"}


def test_concat_stack_split():
    a, b = f32(4, 6), f32(4, 2)
    res = check("concat", [[a, b]], [[S(a.shape, [(0,), (1,)]), S(b.shape, [(), ()])]], {"axis": 1})
    assert res.outputs[0].dims == ((0,), ())
    check("stack", [[a, a]], [[S(a.shape, [(0,), (1,)]), S(a.shape, [(), ()])]], {"axis": 1})
    res = check("split", [f32(4, 6)], [S((4, 6), [(0,), (1,)])], {"num_or_sections": [2, -1, 1], "axis": 1})
    assert [o.shape for o in res.outputs] == [(4, 2), (4, 3), (4, 1)] and res.outputs[0].dims == ((0,), ())


def test_flashmask_batch_and_heads():
    q, k, v = f32(2, 8, 4, 16), f32(2, 8, 2, 16), f32(2, 8, 2, 16)
    mask = np.full((2, 1, 8, 1), 8, dtype=np.int32)
    mask[:, :, :4, 0] = 6
    specs = [S(q.shape, [(0,), (), (1,), ()]), S(k.shape, [(), (), (), ()]), S(v.shape, [(0,), (), (), ()]),
             S(mask.shape, [(), (), (), ()]), None]
    res = check("flashmask_attention_op", [q, k, v, mask, None], specs, {"causal": True}, rtol=1e-4)
    assert res.outputs[0].dims == ((0,), (), (1,), ()) and res.outputs[1].dims == ((0,), (1,), ())


def test_fallback_replicates():
    x = f32(4, 6)
    res = spmd.get_rule("cumsum")([S(x.shape, [(0,), (1,)])], {})
    assert res.outputs is None and res.inputs[0].dims == ((), ())


def test_register_rule_and_bad_input():
    with pytest.raises(TypeError, match="register_rule"):
        spmd.register_rule("x", 3)
    with pytest.raises(ValueError, match="matmul"):
        spmd.get_rule("matmul")([S((4, 6), [(), ()]), S((5, 4), [(), ()])], {})
    with pytest.raises(ValueError, match="reshape"):
        spmd.get_rule("reshape")([S((4, 6), [(), ()])], {"shape": [5, 5]})
