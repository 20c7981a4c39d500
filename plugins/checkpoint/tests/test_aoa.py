"""The AoA mapping engine (flex/aoa.py, flex/aoa_syntax.py), checked against an eager numpy oracle.

The oracle runs the same statements (macros written out by hand) on whole numpy arrays with
np.split / np.concatenate / transpose / astype. The engine's answer for a request box is assembled
from Mapping.pieces alone (source slice, transpose, casts, written where the piece's dst_box says),
each element exactly once, and compared bit for bit with the oracle's array cut to the box.
"""

from __future__ import annotations

import ast
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

from oarlock.dtypes import all_dtypes
from oarlock_checkpoint.flex.aoa import Piece, build_mapping
from oarlock_checkpoint.flex.aoa_syntax import compile_statements, parse
from oarlock_checkpoint.flex.boxes import offset_of, relative, shape_of, slices, whole

NP = {d.name: np.dtype(d.np) for d in all_dtypes}
NAME = {dtype: name for name, dtype in NP.items()}
_VALUE = r"(\"[^\"]*\"|'[^']*'|-?\d+)"
_rng = np.random.default_rng(0)


def arr(*shape, dtype="float32"):
    if NP[dtype].kind in "iub":
        return _rng.integers(-100, 100, shape).astype(NP[dtype])
    return _rng.standard_normal(shape).astype(NP[dtype])


# -- the oracle ---------------------------------------------------------------------------------------
def eager(statements, arrays):
    """Run plain statements (a^T allowed on the left) on whole arrays: (env, created)."""
    env, created = dict(arrays), set()
    for line in "\n".join(statements).splitlines():
        if not line.strip():
            continue
        lhs, rhs = line.split("->")
        attrs = [(k, v.strip("'\"") if v[0] in "'\"" else int(v)) for k, v in re.findall(r"(\w+)\s*=\s*" + _VALUE, rhs)]
        rhs = re.sub(r"\w+\s*=\s*" + _VALUE, "", rhs)
        left = [n.strip() for n in lhs.split(",")]
        right = [n.strip() for n in rhs.split(",") if n.strip()]
        if right == ["_"]:
            del env[left[0]]
            continue
        if left == ["_"]:
            env.pop(right[0], None)
            created.add(right[0])
            continue
        values = [env[n[:-2]].T if n.endswith("^T") else env[n] for n in left]
        created -= set(right)
        if len(left) == 1 and len(right) == 1:
            x = values[0]
            for key, value in attrs:
                if key == "permute":
                    x = x.T if value == "[]" else x.transpose(eval(value))
                elif key == "dtype":
                    x = x.astype(NP[value])
            env[right[0]] = x
        elif len(left) == 1:
            env.update(zip(right, np.split(values[0], len(right), axis=dict(attrs)["axis"])))
        else:
            env[right[0]] = np.concatenate(values, axis=dict(attrs)["axis"])
    return env, created


def assemble(mapping, key, box, arrays):
    """The data for `box` of `key`, built from the pieces only; checks that they tile the box."""
    out = np.zeros(shape_of(box), NP[mapping.dtype_of(key)])
    hits = np.zeros(shape_of(box), int)
    for piece in mapping.pieces(key, box):
        assert isinstance(piece, Piece)
        data = arrays[piece.src_key][slices(piece.src_box)].transpose(piece.perm)
        for cast in piece.casts:
            data = data.astype(NP[cast])
        out[slices(relative(piece.dst_box, box))] = data
        hits[slices(relative(piece.dst_box, box))] += 1
    assert (hits == 1).all(), f"{key} {box}: the pieces do not tile the box exactly once"
    return out


def request_boxes(shape, rng):
    """The whole tensor, single elements, and random boxes (which cut across piece boundaries)."""
    boxes = [whole(shape)]
    if 0 in shape or not shape:
        return boxes
    for _ in range(3):
        index = [int(rng.integers(0, n)) for n in shape]
        boxes.append(tuple((i, i + 1) for i in index))
    for _ in range(8):
        box = []
        for n in shape:
            start = int(rng.integers(0, n))
            box.append((start, int(rng.integers(start + 1, n + 1))))
        boxes.append(tuple(box))
    return boxes


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check(statements, arrays, dst, oracle=None, created=(), missing=(), dropped=(), config=True):
    """Build the mapping for `statements` and compare every destination key with the oracle.
    dst: {key: None (shape and dtype as the oracle's) or a shape (float32; for created / missing keys)}."""
    env, made = eager(oracle if oracle is not None else statements, arrays)
    source = {key: (a.shape, NAME[a.dtype]) for key, a in arrays.items()}
    destination = {key: (env[key].shape, NAME[env[key].dtype]) if shape is None else (shape, "float32")
                   for key, shape in dst.items()}
    mapping = build_mapping({"aoa_statements": list(statements)} if config else None, source, destination)
    assert mapping.created == frozenset(created) == frozenset(made & set(dst))
    assert mapping.missing == tuple(sorted(missing))
    assert mapping.dropped == frozenset(dropped)
    rng = np.random.default_rng(1)
    for key in dst:
        if key in created or key in missing:
            assert key not in env or key in made
            continue
        expected = env[key]
        assert mapping.dtype_of(key) == NAME[expected.dtype]
        for box in request_boxes(expected.shape, rng):
            got = assemble(mapping, key, box, arrays)
            assert same(got, expected[slices(box)]), f"{key} box {box}"
    return mapping


# -- the algebra, against the oracle -------------------------------------------------------------------
def test_no_config_is_identity_and_reports_missing():
    arrays = {"a": arr(3, 4), "b": arr(5)}
    m = check([], arrays, {"a": None, "b": None, "c": (2,)}, missing=["c"], config=False)
    assert m.sources_of("a") == {"a"}
    assert m.pieces("a", whole((3, 4))) == [Piece("a", whole((3, 4)), whole((3, 4)), (0, 1), ())]


def test_rename_and_identity_fallback():
    arrays = {"a": arr(3, 4), "keep": arr(2, 2), "0.weight": arr(2)}
    m = check(["a -> b", "0.weight -> layers.0.weight"], arrays,
              {"b": None, "keep": None, "a": None, "layers.0.weight": None})
    assert m.sources_of("b") == {"a"}  # a rename does not consume its source: `a` still loads as itself


@pytest.mark.parametrize("shape, axis, parts", [((6, 4), 0, 3), ((4, 6), 1, 2), ((2, 3, 8), 2, 4),
                                                ((2, 6, 5), 1, 3), ((4, 6), -1, 3)])
def test_split(shape, axis, parts):
    names = [f"p{i}" for i in range(parts)]
    check([f"a -> {', '.join(names)}, axis={axis}"], {"a": arr(*shape)}, dict.fromkeys(names))


def test_concat():
    arrays = {"a": arr(3, 2), "b": arr(3, 5), "c": arr(3, 1)}
    check(["a, b, c -> abc, axis=1", "a, a -> aa, axis=0"], arrays, {"abc": None, "aa": None})


def test_split_then_concat_in_another_order():
    arrays = {"w": arr(4, 9), "v": arr(6, 3)}
    check(["w -> w0, w1, w2, axis=1", "w2, w0, w1 -> rolled, axis=1",
           "v -> v0, v1, v2, axis=0", "v2, v1^T, v0 -> mixed, axis=0"],
          {"w": arrays["w"], "v": arr(9, 3)}, {"rolled": None})
    arrays = {"v": arr(6, 3)}
    check(["v -> v0, v1, axis=0", "v1^T, v0 -> mixed, axis=0", "mixed -> m0, m1, m2, axis=1",
           "m2, m0, m1 -> out, axis=1"], arrays, {"out": None})


@pytest.mark.parametrize("perm", ["[1,0]", "[]"])
def test_permute_2d(perm):
    check([f'a -> b, permute="{perm}"'], {"a": arr(3, 5)}, {"b": None})


@pytest.mark.parametrize("perm", ["[2,0,1]", "[1, 2, 0]", "[0,2,1]", "[]"])
def test_permute_3d(perm):
    check([f"a -> b, permute='{perm}'"], {"a": arr(2, 3, 4)}, {"b": None})


def test_transpose_suffix():
    arrays = {"a": arr(3, 5), "c": arr(2, 3, 4), "d": arr(3, 2)}
    check(["a^T -> b", "c^T -> ct", "a^T, d^T -> ad, axis=0", "a^T -> a"], arrays,
          {"b": None, "ct": None, "ad": None, "a": None},
          oracle=["a^T -> b", "c^T -> ct", "a^T, d^T -> ad, axis=0", "a^T -> a"])


def test_slices_of_permuted_views_compose():
    """Split after a permute and permute after a split: the source axis that moves is perm[axis]."""
    arrays = {"a": arr(4, 6, 8)}
    check(['a -> t, permute="[2,0,1]"', "t -> t0, t1, axis=0", "t1 -> u0, u1, u2, axis=2",
           'u1 -> u1p, permute="[1,2,0]"', "u1p, u1p -> out, axis=1", "u0^T -> back"],
          arrays, {"out": None, "back": None, "t0": None})


@pytest.mark.parametrize("src, to", [("float32", "float16"), ("float32", "bfloat16"), ("float16", "float32"),
                                     ("bfloat16", "float32"), ("float32", "int32"), ("int64", "float32"),
                                     ("float32", "float8_e4m3fn")])
def test_cast(src, to):
    m = check([f"a -> b, dtype='{to}'"], {"a": arr(3, 4, dtype=src)}, {"b": None})
    assert m.dtype_of("b") == to
    assert all(p.casts == (to,) for p in m.pieces("b", whole((3, 4))))


def test_cast_to_bfloat16_matches_ml_dtypes():
    a = arr(4, 4)
    m = build_mapping({"aoa_statements": ["a -> b, dtype='bfloat16'"]}, {"a": ((4, 4), "float32")},
                      {"b": ((4, 4), "bfloat16")})
    got = assemble(m, "b", whole((4, 4)), {"a": a})
    assert same(got, a.astype(ml_dtypes.bfloat16))


def test_cast_to_the_same_dtype_adds_no_cast():
    m = check(["a -> b, dtype='float32'"], {"a": arr(3)}, {"b": None})
    assert m.pieces("b", whole((3,)))[0].casts == ()


def test_chained_attributes_apply_in_order():
    arrays = {"a": arr(3, 5), "c": arr(2, 3, 4)}
    m = check(['a -> b, permute="[1,0]", dtype="float16"', 'a -> b2, dtype="float16", permute="[]"',
               'c -> c2, permute="[2,0,1]", permute="[2,0,1]", dtype="bfloat16", dtype="float32"',
               'a -> a3, dtype="float16", axis=1, dtype="float32"'],
              arrays, {"b": None, "b2": None, "c2": None, "a3": None})
    assert m.pieces("c2", whole((3, 4, 2)))[0].casts == ("bfloat16", "float32")
    assert m.dtype_of("a3") == "float32"


def test_drop():
    arrays = {"a": arr(3), "b": arr(2)}
    check(["a -> _"], arrays, {"a": (3,), "b": None}, missing=["a"], dropped=["a"])
    # renamed before the drop: the rename still reads a; `a` itself is not loaded
    m = check(["a -> c", "a -> _"], arrays, {"a": (3,), "c": None}, missing=["a"], dropped=["a"])
    assert m.sources_of("c") == {"a"}
    # something else produces a afterwards
    check(["a -> _", "b, b -> x, axis=0", "x -> y, a, axis=0"], {"a": arr(2), "b": arr(2)},
          {"a": None, "y": None}, dropped=["a"])


def test_create():
    arrays = {"a": arr(3), "b": arr(2)}
    m = check(["_ -> b", "_ -> new", "_ -> not_in_destination"], arrays, {"a": None, "b": (2,), "new": (4,)},
              created=["b", "new"])
    with pytest.raises(KeyError, match="'b' is created"):
        m.pieces("b", whole((2,)))
    # the last statement naming a key wins
    check(["_ -> b", "a -> b"], arrays, {"b": None})
    check(["a -> b", "_ -> b"], arrays, {"b": (3,)}, created=["b"])


def test_intermediates_feed_later_statements():
    arrays = {"qkv": arr(4, 12), "o": arr(4, 4)}
    check(["qkv -> q, k, v, axis=1", "q -> model.q.weight", "k, v -> kv, axis=1",
           "kv -> model.kv.weight, permute='[1,0]'", "o -> tmp", "tmp -> model.o.weight, dtype='float16'"],
          arrays, {"model.q.weight": None, "model.kv.weight": None, "model.o.weight": None})


def test_several_statements_in_one_string_and_free_whitespace():
    arrays = {"a": arr(4, 2)}
    check(["  a->x0,x1 ,axis = 0\n\n   x1,x0->y,axis=0  \n y -> z ,permute = '[ 1 , 0 ]'"], arrays,
          {"z": None}, oracle=["a -> x0, x1, axis=0", "x1, x0 -> y, axis=0", "y -> z, permute='[1,0]'"])


def test_zero_dim_tensor():
    arrays = {"s": arr(), "t": arr()}
    m = check(["s -> s2", "t -> t2, permute='[]', dtype='float16'"], arrays, {"s2": None, "t2": None, "s": None})
    assert m.pieces("s2", ()) == [Piece("s", (), (), (), ())]
    assert m.pieces("t2", ())[0].casts == ("float16",)


def test_empty_tensor():
    arrays = {"e": arr(0, 4)}
    m = check(["e -> e0, e1, axis=1"], arrays, {"e0": None, "e1": None})
    assert m.pieces("e0", whole((0, 2))) == []


def test_missing_keys_reported_not_raised():
    arrays = {"a": arr(2)}
    m = check(["a -> b"], arrays, {"b": None, "x": (3,), "a": None, "y.w": (1,)}, missing=["x", "y.w"])
    with pytest.raises(KeyError, match="'x' has no source"):
        m.dtype_of("x")


# -- macros -------------------------------------------------------------------------------------------
def test_layer_id_from_source_keys():
    arrays = {f"layers.{i}.qkv": arr(3, 6) for i in range(3)}
    arrays["layers.1.other"] = arr(2)
    statements = ["layers.$LAYER_ID.qkv -> q.$LAYER_ID, layers.$LAYER_ID.kv, axis=1",
                  "q.$LAYER_ID -> layers.$LAYER_ID.q, permute='[]'"]
    oracle = [f"layers.{i}.qkv -> q.{i}, layers.{i}.kv, axis=1" for i in range(3)]
    oracle += [f"q.{i} -> layers.{i}.q, permute='[]'" for i in range(3)]
    dst = {f"layers.{i}.{n}": None for i in range(3) for n in ("q", "kv")}
    check(statements, arrays, dst, oracle=oracle)


def test_layer_id_from_destination_keys_in_numeric_order():
    arrays = {"shared": arr(2, 3)}
    dst = {f"layers.{i}.tied": None for i in (0, 2, 10)}
    plain = compile_statements(["shared -> layers.$LAYER_ID.tied"], arrays, {k: None for k in dst})
    assert [s.right for s in plain] == [("layers.0.tied",), ("layers.2.tied",), ("layers.10.tied",)]
    check(["shared -> layers.$LAYER_ID.tied"], arrays, dst, oracle=[f"shared -> {k}" for k in dst])


def test_star_expands_in_numeric_order():
    arrays = {f"experts.{i}.w": arr(2, 3) for i in range(12)}
    order = [f"experts.{i}.w" for i in range(12)]  # lexicographic order would put 10 and 11 after 1
    check(["experts.*.w -> fused, axis=0"], arrays, {"fused": None},
          oracle=[f"{', '.join(order)} -> fused, axis=0"])
    plain = compile_statements(["experts.*.w -> fused, axis=0"], arrays, {"fused": None})
    assert plain[0].left == tuple(order)


def test_star_on_the_right_matches_destination_keys():
    arrays = {"fused": arr(12, 2)}
    dst = {f"experts.{i}.w": None for i in range(12)}
    check(["fused -> experts.*.w, axis=0"], arrays, dst,
          oracle=[f"fused -> {', '.join(dst)}, axis=0"])


def test_star_non_numeric_matches_sort_lexicographically():
    arrays = {"x.b.w": arr(1, 2), "x.a.w": arr(1, 2), "x.c.w": arr(1, 2)}
    check(["x.*.w -> cat, axis=0"], arrays, {"cat": None}, oracle=["x.a.w, x.b.w, x.c.w -> cat, axis=0"])


def test_star_pattern_rename():
    arrays = {"model.a.w": arr(2, 3), "model.b.w": arr(3, 4), "model.b.bias": arr(4), "other": arr(1)}
    m = check(["model.* -> *"], arrays, {"a.w": None, "b.w": None, "b.bias": None, "other": None},
              oracle=["model.a.w -> a.w", "model.b.w -> b.w", "model.b.bias -> b.bias"])
    assert m.sources_of("b.w") == {"model.b.w"}
    check(["model.*.w -> new.*.weight, permute='[]', dtype='float16'"], arrays,
          {"new.a.weight": None, "new.b.weight": None},
          oracle=["model.a.w -> new.a.weight, permute='[]', dtype='float16'",
                  "model.b.w -> new.b.weight, permute='[]', dtype='float16'"])


def test_star_drop_and_create_each_match():
    arrays = {"opt.0": arr(1), "opt.1": arr(1), "w": arr(2)}
    check(["opt.* -> _"], arrays, {"w": None, "opt.0": (1,)}, missing=["opt.0"], dropped=["opt.0", "opt.1"],
          oracle=["opt.0 -> _", "opt.1 -> _"])
    check(["_ -> new.*"], arrays, {"w": None, "new.x": (1,), "new.y": (2,)}, created=["new.x", "new.y"],
          oracle=["_ -> new.x", "_ -> new.y"])


def test_star_matches_names_from_earlier_statements():
    arrays = {"qkv": arr(2, 6)}
    check(["qkv -> m.q, m.k, m.v, axis=1", "m.* -> *"], arrays, {"q": None, "k": None, "v": None},
          oracle=["qkv -> m.q, m.k, m.v, axis=1", "m.k -> k", "m.q -> q", "m.v -> v"])


def test_layer_id_with_star():
    arrays = {f"layers.{i}.experts.{e}.w": arr(2, 2) for i in range(2) for e in range(3)}
    oracle = [f"layers.{i}.experts.0.w, layers.{i}.experts.1.w, layers.{i}.experts.2.w -> layers.{i}.w, axis=0"
              for i in range(2)]
    check(["layers.$LAYER_ID.experts.*.w -> layers.$LAYER_ID.w, axis=0"], arrays,
          {"layers.0.w": None, "layers.1.w": None}, oracle=oracle)


# -- fused_qkv ----------------------------------------------------------------------------------------
H, G, D = 8, 2, 4  # query heads, key/value heads, head width


def qkv_split_oracle(qkv, axis=-1):
    """From the layout: for each kv group g, H/G q heads, then k head g, then v head g (reshape-based)."""
    x = np.moveaxis(qkv, axis, -1)
    x = x.reshape(x.shape[:-1] + (G, H // G + 2, D))
    q = x[..., :H // G, :].reshape(x.shape[:-3] + (H * D,))
    k = x[..., H // G, :].reshape(x.shape[:-3] + (G * D,))
    v = x[..., H // G + 1, :].reshape(x.shape[:-3] + (G * D,))
    return [np.moveaxis(t, -1, axis) for t in (q, k, v)]


def qkv_fuse_oracle(q, k, v, axis=-1):
    q, k, v = (np.moveaxis(t, axis, -1) for t in (q, k, v))
    lead = q.shape[:-1]
    fused = np.concatenate([q.reshape(lead + (G, H // G, D)), k.reshape(lead + (G, 1, D)),
                            v.reshape(lead + (G, 1, D))], axis=-2)
    return np.moveaxis(fused.reshape(lead + ((H + 2 * G) * D,)), -1, axis)


def check_against(statements, arrays, expected: dict):
    source = {key: (a.shape, NAME[a.dtype]) for key, a in arrays.items()}
    destination = {key: (a.shape, NAME[a.dtype]) for key, a in expected.items()}
    mapping = build_mapping({"aoa_statements": statements}, source, destination)
    rng = np.random.default_rng(2)
    for key, want in expected.items():
        for box in request_boxes(want.shape, rng):
            assert same(assemble(mapping, key, box, arrays), want[slices(box)]), f"{key} {box}"
    return mapping


@pytest.mark.parametrize("shape, axis", [((6, (H + 2 * G) * D), None), (((H + 2 * G) * D,), None),
                                         (((H + 2 * G) * D, 5), 0)])
def test_fused_qkv_split(shape, axis):
    qkv = arr(*shape)
    extra = f", axis={axis}" if axis is not None else ""
    q, k, v = qkv_split_oracle(qkv, -1 if axis is None else axis)
    check_against([f"qkv -> q, k, v, fused_qkv, num_heads={H}, num_key_value_groups={G}{extra}"], {"qkv": qkv},
                  {"q": q, "k": k, "v": v})


@pytest.mark.parametrize("lead", [(6,), ()])
def test_fused_qkv_fuse(lead):
    q, k, v = arr(*lead, H * D), arr(*lead, G * D), arr(*lead, G * D)
    check_against([f"q, k, v -> qkv, fused_qkv, num_heads={H}, num_key_value_groups={G}"],
                  {"q": q, "k": k, "v": v}, {"qkv": qkv_fuse_oracle(q, k, v)})


def test_fused_qkv_flag_after_the_attributes_and_explicit_axis():
    q, k, v = arr(H * D, 3), arr(G * D, 3), arr(G * D, 3)
    check_against([f"q, k, v -> qkv, num_heads={H}, num_key_value_groups={G}, axis=0, fused_qkv"],
                  {"q": q, "k": k, "v": v}, {"qkv": qkv_fuse_oracle(q, k, v, axis=0)})


def test_fused_qkv_round_trip_is_the_identity():
    qkv = arr(5, (H + 2 * G) * D)
    m = check_against([f"qkv -> q, k, v, fused_qkv, num_heads={H}, num_key_value_groups={G}",
                       f"q, k, v -> qkv2, fused_qkv, num_heads={H}, num_key_value_groups={G}"],
                      {"qkv": qkv}, {"qkv2": qkv})
    assert all(p.src_box == p.dst_box and p.perm == (0, 1) for p in m.pieces("qkv2", whole(qkv.shape)))


def test_fused_qkv_per_layer():
    arrays = {f"layers.{i}.qkv": arr(3, (H + 2 * G) * D) for i in range(2)}
    expected = {}
    for i in range(2):
        q, k, v = qkv_split_oracle(arrays[f"layers.{i}.qkv"])
        expected.update({f"layers.{i}.q": q.T, f"layers.{i}.k": k, f"layers.{i}.v": v})
    check_against(["layers.$LAYER_ID.qkv -> q.$LAYER_ID, layers.$LAYER_ID.k, layers.$LAYER_ID.v, fused_qkv, "
                   f"num_heads={H}, num_key_value_groups={G}", "q.$LAYER_ID^T -> layers.$LAYER_ID.q"],
                  arrays, expected)


def test_fused_qkv_mha():
    """num_key_value_groups == num_heads: one q head per group."""
    qkv = arr(2, 3 * 4 * 2)
    m = build_mapping({"aoa_statements": ["qkv -> q, k, v, fused_qkv, num_heads=4, num_key_value_groups=4"]},
                      {"qkv": ((2, 24), "float32")}, {"q": ((2, 8), "float32"), "k": ((2, 8), "float32"),
                                                       "v": ((2, 8), "float32")})
    x = qkv.reshape(2, 4, 3, 2)
    for name, i in (("q", 0), ("k", 1), ("v", 2)):
        assert same(assemble(m, name, whole((2, 8)), {"qkv": qkv}), x[:, :, i, :].reshape(2, 8))


# -- Paddle 3.2's own engine, an optional second oracle --------------------------------------------------
@pytest.fixture(scope="module")
def paddle_aoa():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # paddle's import-time notices
        engine = pytest.importorskip("paddle.distributed.flex_checkpoint.aoa.aoa_engine")
        sharded = pytest.importorskip("paddle.distributed.flex_checkpoint.dcp.sharded_weight")
    return engine.AOAEngine, sharded.ShardedWeightDesc


@pytest.mark.parametrize("statements, src, dst", [
    ([f"qkv -> q, k, v, fused_qkv, num_heads={H}, num_key_value_groups={G}"], {"qkv": (6, (H + 2 * G) * D)},
     {"q": (6, H * D), "k": (6, G * D), "v": (6, G * D)}),
    ([f"q, k, v -> qkv, fused_qkv, num_heads={H}, num_key_value_groups={G}"],
     {"q": (6, H * D), "k": (6, G * D), "v": (6, G * D)}, {"qkv": (6, (H + 2 * G) * D)}),
    (["a -> t, permute='[2,0,1]'", "t -> t0, t1, axis=0", "t1 -> u0, u1, u2, axis=2",
      "u1 -> u1p, permute='[1,2,0]'", "u0^T -> u0t, permute='[1,0,2]'", "u1p, u0t -> out, axis=1"],
     {"a": (4, 6, 6)}, {"out": (4, 4, 3), "t0": (3, 4, 6)}),
    (["a^T -> b, dtype='float16'", "c^T, c^T -> cc, axis=1"], {"a": (3, 5), "c": (2, 3, 4)},
     {"b": (5, 3), "cc": (4, 6, 2)}),
])
def test_agrees_with_paddle(paddle_aoa, statements, src, dst):
    """Paddle's AOAEngine.find_shard_sources and Mapping.pieces deliver the same data for every request box
    (where Paddle's semantics are sound: its $LAYER_ID and '*' match other keys than ours)."""
    engine_class, desc = paddle_aoa
    info = lambda specs: {k: [desc(k, s, s, (0,) * len(s))] for k, s in specs.items()}
    engine = engine_class({"aoa_statements": statements}, info(src), info(dst))
    arrays = {k: arr(*s) for k, s in src.items()}
    mapping = build_mapping({"aoa_statements": statements}, {k: (s, "float32") for k, s in src.items()},
                            {k: (s, "float32") for k, s in dst.items()})
    rng = np.random.default_rng(3)
    for key, shape in dst.items():
        for box in request_boxes(shape, rng):
            theirs = np.zeros(shape_of(box), NP[mapping.dtype_of(key)])
            for entry in engine.find_shard_sources(desc(key, shape_of(box), shape, offset_of(box))):
                source, target = entry.source_slice, entry.target_slice
                data = arrays[source.key][tuple(slice(o, o + n) for o, n in zip(source.global_offset,
                                                                                 source.local_shape))]
                for step in entry.postprocess_list or []:
                    data = data.transpose(ast.literal_eval(step)) if step.startswith("[") else data.astype(NP[step])
                target_box = tuple((o, o + n) for o, n in zip(target.global_offset, target.local_shape))
                theirs[slices(relative(target_box, box))] = data
            assert same(assemble(mapping, key, box, arrays), theirs), f"{key} {box}"


# -- errors -------------------------------------------------------------------------------------------
SRC = {"a": ((4, 6), "float32"), "b": ((4, 2), "float32"), "c": ((3, 6), "float32"), "h": ((4, 6), "float16"),
       "qkv": ((2, 48), "float32")}


def build(statements, destination=None, source=SRC):
    return build_mapping({"aoa_statements": statements}, source, destination or {})


@pytest.mark.parametrize("text, message", [
    ("a -> b; c", r"aoa statement 'a -> b; c': unexpected character ';' at position 6"),
    ("a b", r"aoa statement 'a b': expected ',' or '->', got 'b' at position 2"),
    ("a ->", r"aoa statement 'a ->': expected a tensor name, got the end of the statement at position 4"),
    ("a -> b, axis='1'", r"expected an integer for axis, got \"'1'\" at position 13"),
    ("a -> b, dtype=3", r"expected a quoted string for dtype, got '3'"),
    ("a -> b, axis=1, permute", r"expected '=' after the attribute 'permute'"),
    ("a -> b c", r"expected ',' or the end of the statement, got 'c' at position 7"),
    ("a -> b, permute='[1,0", r"an unterminated string at position 16"),
    ("a -> b, permute='[a,b]'", r"bad permute '\[a,b\]'"),
    ("a -> b, dtype='float'", r"unknown dtype 'float' at position 14; accepted: bfloat16, bool"),
    ("a -> b, scale=2", r"aoa statement 'a -> b, scale=2': unknown attribute 'scale' at position 8; accepted: axis"),
    ("a -> b^T", r"cannot assign to a transpose \('b\^T' on the right side\).*Assign first"),
    ("a -> b, fused_ffn", r"fused_ffn is not supported"),
])
def test_syntax_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)
    with pytest.raises(ValueError, match=message):
        build([text])


@pytest.mark.parametrize("statements, message", [
    (["x -> y"], r"aoa statement 'x -> y': unknown name 'x': it is neither a source key nor produced"),
    (["a -> _", "a -> y"], r"aoa statement 'a -> y': 'a' was dropped by aoa statement 'a -> _'"),
    (["a -> p, q, r, s, axis=1"], r"aoa statement 'a -> p, q, r, s, axis=1': cannot split axis 1 of size 6 "
                                  r"\(shape \[4, 6\]\) into 4 equal parts"),
    (["a, c -> ac, axis=1"], r"aoa statement 'a, c -> ac, axis=1': cannot concatenate along axis 1: a has shape "
                             r"\[4, 6\] but c has shape \[3, 6\]"),
    (["a, h -> ah, axis=0"], r"cannot concatenate a \(float32\) with h \(float16\); cast them"),
    (["a -> b2, permute='[0,0]'"], r"aoa statement \"a -> b2, permute='\[0,0\]'\": bad permute \[0, 0\] for a "
                                   r"tensor of shape \[4, 6\]"),
    (["a -> b2, permute='[2,0,1]'"], r"bad permute \[2, 0, 1\] for a tensor of shape \[4, 6\]"),
    (["a -> p, q, axis=2"], r"axis 2 is out of range for a tensor of shape \[4, 6\] \(accepted: -2 .. 1\)"),
    (["a -> p, q"], r"a split or concat takes exactly one attribute, axis=, got none"),
    (["a -> p, q, axis=0, dtype='float16'"], r"takes exactly one attribute, axis=, got axis, dtype"),
    (["a, b -> p, q, axis=0"], r"2 names -> 2 names"),
    (["a -> b2, num_heads=2"], r"num_heads / num_key_value_groups go with fused_qkv only"),
    (["a -> _, axis=0"], r"'_' must be a whole side"),
    (["a, _ -> y, axis=0"], r"'_' must be a whole side"),
    (["_^T -> y"], r"'_\^T' means nothing"),
    (["nope.* -> y"], r"aoa statement 'nope.\* -> y': no source key \(or name defined by an earlier statement\) "
                      r"matches the pattern 'nope.\*'"),
    (["a -> nope.*, axis=0"], r"no destination key matches the pattern 'nope.\*'"),
    (["layers.$LAYER_ID.w -> y"], r"aoa statement 'layers.\$LAYER_ID.w -> y': no source key .* matches "
                                  r"'layers.\$LAYER_ID.w', so no layer id"),
    (["a -> layers.$LAYER_ID.w"], r"no destination key matches 'layers.\$LAYER_ID.w'"),
])
def test_statement_errors(statements, message):
    with pytest.raises(ValueError, match=message):
        build(statements)


@pytest.mark.parametrize("statement, message", [
    ("qkv -> q, k, v, fused_qkv, num_heads=8, num_key_value_groups=3", r"positive with H divisible by G; "
                                                                       r"got num_heads=8, num_key_value_groups=3"),
    ("qkv -> q, k, v, fused_qkv, num_heads=0, num_key_value_groups=2", r"got num_heads=0"),
    ("qkv -> q, k, v, fused_qkv, num_heads=8", r"got num_heads=8, num_key_value_groups=None"),
    ("qkv -> q, k, v, fused_qkv, num_heads=6, num_key_value_groups=2",
     r"cannot split axis 1 of size 48 \(shape \[2, 48\]\) into 6 q \+ 2 k \+ 2 v heads"),
    ("qkv -> q, k, fused_qkv, num_heads=8, num_key_value_groups=2", r"fused_qkv takes `qkv -> q, k, v`"),
    ("qkv -> q, k, v, fused_qkv, num_heads=8, num_key_value_groups=2, dtype='float16'",
     r"fused_qkv accepts num_heads, num_key_value_groups and axis, not dtype"),
])
def test_fused_qkv_errors(statement, message):
    with pytest.raises(ValueError, match=r"aoa statement ['\"].*fused_qkv.*['\"]: .*" + message):
        build([statement])


def test_fused_qkv_head_width_mismatch():
    source = {"q": ((4, 16), "float32"), "k": ((4, 4), "float32"), "v": ((4, 4), "float32")}
    with pytest.raises(ValueError, match=r"aoa statement 'q, k, v -> qkv, fused_qkv, num_heads=8, "
                                         r"num_key_value_groups=4': fused_qkv: the head widths differ along axis 1: "
                                         r"q 2 \(16 / 8 heads\), k 1, v 1 \(4 and 4 / 4 heads\)"):
        build(["q, k, v -> qkv, fused_qkv, num_heads=8, num_key_value_groups=4"], source=source)
    source["k"] = ((4, 8), "float32")
    with pytest.raises(ValueError, match=r"q 2 \(16 / 8 heads\), k 4, v 2 \(8 and 4 / 2 heads\)"):
        build(["q, k, v -> qkv, fused_qkv, num_heads=8, num_key_value_groups=2"], source=source)
    source["q"] = ((4, 6), "float32")
    with pytest.raises(ValueError, match=r"fused_qkv: q \(shape \[4, 6\]\) must have 4 heads of equal width along "
                                         r"axis 1"):
        build(["q, k, v -> qkv, fused_qkv, num_heads=4, num_key_value_groups=2"], source=source)


def test_shape_mismatch_with_destination_names_key_and_statement():
    with pytest.raises(ValueError, match=r"build_mapping: destination 'y' \(produced by aoa statement "
                                         r"'a -> y, permute=\"\[\]\"'\) has shape \[6, 4\] in the mapping but "
                                         r"\[4, 6\] in the destination"):
        build(['a -> y, permute="[]"'], {"y": ((4, 6), "float32")})
    with pytest.raises(ValueError, match=r"destination 'b' \(the source key of the same name\) has shape \[4, 2\]"):
        build_mapping(None, SRC, {"b": ((2, 4), "float32")})
    with pytest.raises(ValueError, match=r"\(produced by aoa statement 'layers.\$LAYER_ID.w -> y.\$LAYER_ID' "
                                         r"\(expanded: 'layers.1.w -> y.1'\)\)"):
        build(["layers.$LAYER_ID.w -> y.$LAYER_ID"], {"y.0": ((2,), "float32"), "y.1": ((2,), "float32")},
              source={"layers.0.w": ((2,), "float32"), "layers.1.w": ((3,), "float32")})


def test_dtype_mismatch_is_reported_not_raised():
    m = build(["h -> y"], {"y": ((4, 6), "float32")})
    assert m.dtype_of("y") == "float16"


@pytest.mark.parametrize("config, error, message", [
    ("a -> b", TypeError, r"aoa_config must be None or \{\"aoa_statements\": \[str, ...\]\}, got str"),
    (["a -> b"], TypeError, r"aoa_config must be .* got list"),
    ({"statements": ["a -> b"]}, ValueError, r"aoa_config must be .* got the keys \['statements'\]"),
    ({}, ValueError, r"got the keys \[\]"),
    ({"aoa_statements": "a -> b"}, TypeError, r"aoa_config\['aoa_statements'\] must be a list of str"),
    ({"aoa_statements": ["a -> b", 3]}, TypeError, r"aoa_config\['aoa_statements'\] must be a list of str"),
])
def test_bad_aoa_config(config, error, message):
    with pytest.raises(error, match=message):
        build_mapping(config, SRC, {})


def test_bad_specs_and_boxes():
    with pytest.raises(TypeError, match=r"build_mapping: source\['a'\] must be \(global_shape tuple, dtype name\)"):
        build_mapping(None, {"a": (4, 6)}, {})
    m = build_mapping(None, SRC, {"a": ((4, 6), "float32")})
    with pytest.raises(ValueError, match=r"Mapping.pieces: box .* is not inside 'a' of shape \[4, 6\]"):
        m.pieces("a", ((0, 5), (0, 6)))
    with pytest.raises(ValueError, match=r"Mapping.pieces: box"):
        m.pieces("a", ((0, 4),))
    with pytest.raises(KeyError, match=r"Mapping.sources_of: 'zz' is not a destination key"):
        m.sources_of("zz")
