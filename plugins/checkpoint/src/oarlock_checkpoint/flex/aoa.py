"""The AoA ("Any-to-Any") structure mapping of FlexCheckpoint: Paddle 3.2's
`aoa_config={"aoa_statements": [...]}` of load_state_dict, as slice algebra (no data is touched).

build_mapping() runs the statements (parsed and macro-expanded by aoa_syntax) over *views*. A view is
a shape, a dtype and a tuple of Pieces that tile it; each piece says which box of which source tensor
lands where in the view, through which axis permutation and casts. Every source key starts as the
identity view of itself; the statements are run in order over an environment name -> view:

  a -> b                    b = a (then each attribute in the order written: permute=, dtype=; axis= is
                            a split into one part, a no-op. Paddle keeps only the last attribute.)
  a -> b0, b1, axis=k       b_i = the i-th of equal parts of a along axis k (must divide)
  a, b -> c, axis=k         c = a and b concatenated along k (other dims and the dtypes must agree)
  a -> _                    a is removed from the environment: the name is not loaded as itself
                            (views made from a earlier still read it)
  _ -> b                    b is removed and marked created: not loaded, it keeps the value it has
  fused_qkv                 split / fuse a GQA projection, see _fused_qkv()

Later statements override earlier ones (`_ -> b` then `x -> b` loads b from x, and the other way round
b is created). After the statements each destination key takes the view of its name; a key with none
(not a source key, not produced, not created) is reported as missing, and one whose view has another
shape than the destination's is an error. Axes may be negative (axis=-1 is the last).
"""

from __future__ import annotations

from collections.abc import Mapping as _MappingABC
from typing import NamedTuple

from oarlock_checkpoint.flex import aoa_syntax
from oarlock_checkpoint.flex.boxes import intersect, whole
from oarlock_checkpoint.flex.aoa_syntax import NOTHING, Statement

__all__ = ["Piece", "Mapping", "build_mapping"]


class Piece(NamedTuple):
    src_key: str
    src_box: tuple            # box in the SOURCE tensor's global coordinates (boxes.py format)
    dst_box: tuple            # box in the DESTINATION tensor's (or view's) coordinates
    perm: tuple               # data for dst_box == source_array[slices(src_box)].transpose(perm)
    casts: tuple              # dtype names to apply, in order, after transposing


class View(NamedTuple):
    shape: tuple
    dtype: str
    pieces: tuple             # Pieces tiling the view


# -- the view algebra ---------------------------------------------------------------------------------
def _identity(key: str, shape: tuple, dtype: str) -> View:
    box = whole(shape)
    return View(shape, dtype, (Piece(key, box, box, tuple(range(len(shape))), ()),))


def _cut(piece: Piece, box: tuple) -> Piece:
    """The part of `piece` whose dst_box is `box` (inside piece.dst_box): view axis i reads source axis
    perm[i], so that source range moves by the same offset and keeps the same length."""
    src = list(piece.src_box)
    for i, ((lo, hi), (start, _)) in enumerate(zip(box, piece.dst_box)):
        axis = piece.perm[i]
        begin = piece.src_box[axis][0] + lo - start
        src[axis] = (begin, begin + hi - lo)
    return piece._replace(src_box=tuple(src), dst_box=tuple(box))


def _axis(view: View, axis: int, where: str) -> int:
    ndim = len(view.shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{where}: axis {axis} is out of range for a tensor of shape {list(view.shape)} "
                         f"(accepted: {-ndim} .. {ndim - 1})")
    return axis % ndim


def _slice(view: View, axis: int, start: int, stop: int) -> View:
    """view[..., start:stop, ...] along `axis` (already normalized)."""
    region = list(whole(view.shape))
    region[axis] = (start, stop)
    pieces = []
    for piece in view.pieces:
        inter = intersect(tuple(region), piece.dst_box)
        if inter is not None:
            cut = _cut(piece, inter)
            dst = list(cut.dst_box)
            dst[axis] = (dst[axis][0] - start, dst[axis][1] - start)
            pieces.append(cut._replace(dst_box=tuple(dst)))
    shape = list(view.shape)
    shape[axis] = stop - start
    return View(tuple(shape), view.dtype, tuple(pieces))


def _split(view: View, axis: int, parts: int, where: str) -> list:
    axis = _axis(view, axis, where)
    size = view.shape[axis]
    if size % parts:
        raise ValueError(f"{where}: cannot split axis {axis} of size {size} (shape {list(view.shape)}) into "
                         f"{parts} equal parts; the size must be divisible by the number of outputs")
    step = size // parts
    return [_slice(view, axis, i * step, (i + 1) * step) for i in range(parts)]


def _concat(views: list, axis: int, where: str, names=None) -> View:
    names = names or [f"input {i}" for i in range(len(views))]
    axis = _axis(views[0], axis, where)
    first = views[0]
    for name, view in zip(names, views):
        others = [s for i, s in enumerate(view.shape) if i != axis]
        if len(view.shape) != len(first.shape) or others != [s for i, s in enumerate(first.shape) if i != axis]:
            raise ValueError(f"{where}: cannot concatenate along axis {axis}: {names[0]} has shape "
                             f"{list(first.shape)} but {name} has shape {list(view.shape)}; all dimensions other "
                             f"than the axis must agree")
        if view.dtype != first.dtype:
            raise ValueError(f"{where}: cannot concatenate {names[0]} ({first.dtype}) with {name} "
                             f"({view.dtype}); cast them to one dtype first (dtype='...')")
    pieces, offset = [], 0
    for view in views:
        for piece in view.pieces:
            dst = list(piece.dst_box)
            dst[axis] = (dst[axis][0] + offset, dst[axis][1] + offset)
            pieces.append(piece._replace(dst_box=tuple(dst)))
        offset += view.shape[axis]
    shape = list(first.shape)
    shape[axis] = offset
    return View(tuple(shape), first.dtype, tuple(pieces))


def _permute(view: View, perm: tuple, where: str) -> View:
    """view.transpose(perm); () reverses all axes."""
    ndim = len(view.shape)
    perm = perm or tuple(range(ndim - 1, -1, -1))
    if sorted(perm) != list(range(ndim)):
        raise ValueError(f"{where}: bad permute {list(perm)} for a tensor of shape {list(view.shape)}; "
                         f"expected a permutation of {list(range(ndim))}, or \"[]\" to reverse all axes")
    pieces = tuple(piece._replace(dst_box=tuple(piece.dst_box[p] for p in perm),
                                  perm=tuple(piece.perm[p] for p in perm)) for piece in view.pieces)
    return View(tuple(view.shape[p] for p in perm), view.dtype, pieces)


def _cast(view: View, dtype: str) -> View:
    if dtype == view.dtype:  # nothing to do: keep the casts short
        return view
    return View(view.shape, dtype, tuple(piece._replace(casts=piece.casts + (dtype,)) for piece in view.pieces))


# -- fused_qkv ----------------------------------------------------------------------------------------
def _fused_qkv(st: Statement, get, where: str) -> list:
    """Paddle 3.2's fused_qkv: `qkv -> q, k, v, fused_qkv, num_heads=H, num_key_value_groups=G` splits,
    `q, k, v -> qkv, fused_qkv, ...` fuses. As in Paddle, num_key_value_groups is the number of key/value
    heads G; each group g holds H // G query heads. Along the axis (default the last: Paddle's 1 for
    [in, out] weights, and it serves 1-D biases) the fused tensor is, for g in range(G): q heads
    g*H/G .. (g+1)*H/G - 1, k head g, v head g; every head block has the same width."""
    attrs = dict(st.attrs)
    heads, groups = attrs.get("num_heads"), attrs.get("num_key_value_groups")
    if heads is None or groups is None or heads <= 0 or groups <= 0 or heads % groups:
        raise ValueError(f"{where}: fused_qkv needs num_heads=H and num_key_value_groups=G (the number of "
                         f"key/value heads), positive with H divisible by G; got num_heads={heads}, "
                         f"num_key_value_groups={groups}")
    per_group = heads // groups
    axis = attrs.get("axis", -1)
    if (len(st.left), len(st.right)) == (1, 3):
        qkv = get(st.left[0])
        axis = _axis(qkv, axis, where)
        width = qkv.shape[axis]
        if width % (heads + 2 * groups):
            raise ValueError(f"{where}: fused_qkv cannot split axis {axis} of size {width} (shape "
                             f"{list(qkv.shape)}) into {heads} q + {groups} k + {groups} v heads of equal width")
        head = width // (heads + 2 * groups)
        q, k, v = [], [], []
        for g in range(groups):
            start = g * (per_group + 2) * head
            q.append(_slice(qkv, axis, start, start + per_group * head))
            k.append(_slice(qkv, axis, start + per_group * head, start + (per_group + 1) * head))
            v.append(_slice(qkv, axis, start + (per_group + 1) * head, start + (per_group + 2) * head))
        return [_concat(parts, axis, where) for parts in (q, k, v)]
    if (len(st.left), len(st.right)) == (3, 1):
        q, k, v = (get(name) for name in st.left)
        axis = _axis(q, axis, where)
        counts = (heads, groups, groups)
        for name, view, count in zip(st.left, (q, k, v), counts):
            if len(view.shape) != len(q.shape) or view.shape[axis] % count:
                raise ValueError(f"{where}: fused_qkv: {name} (shape {list(view.shape)}) must have {count} "
                                 f"heads of equal width along axis {axis}")
        widths = [view.shape[axis] // count for view, count in zip((q, k, v), counts)]
        if len(set(widths)) != 1:
            raise ValueError(f"{where}: fused_qkv: the head widths differ along axis {axis}: q {widths[0]} "
                             f"({q.shape[axis]} / {heads} heads), k {widths[1]}, v {widths[2]} "
                             f"({k.shape[axis]} and {v.shape[axis]} / {groups} heads); they must be equal")
        head, parts = widths[0], []
        for g in range(groups):
            parts.append(_slice(q, axis, g * per_group * head, (g + 1) * per_group * head))
            parts.append(_slice(k, axis, g * head, (g + 1) * head))
            parts.append(_slice(v, axis, g * head, (g + 1) * head))
        return [_concat(parts, axis, where, names=[f"{st.left[i % 3]} part" for i in range(len(parts))])]
    raise ValueError(f"{where}: fused_qkv takes `qkv -> q, k, v` or `q, k, v -> qkv`, got "
                     f"{len(st.left)} name(s) -> {len(st.right)} name(s)")


# -- running statements -------------------------------------------------------------------------------
class _Run:
    """The environment name -> (view, the statement that produced it or None) and the statements' effects."""

    def __init__(self, source: dict):
        self.env = {key: (_identity(key, shape, dtype), None) for key, (shape, dtype) in source.items()}
        self.source = source
        self.dropped, self.created, self.dropped_by = set(), set(), {}

    def get(self, name: str, st: Statement) -> View:
        if name in self.env:
            return self.env[name][0]
        if name in self.dropped_by:
            raise ValueError(f"{st.where()}: {name!r} was dropped by {self.dropped_by[name].where()}")
        raise ValueError(f"{st.where()}: unknown name {name!r}: it is neither a source key nor produced by an "
                         f"earlier statement")

    def put(self, name: str, view: View, st: Statement):
        self.env[name] = (view, st)
        self.created.discard(name)
        self.dropped_by.pop(name, None)

    def run(self, st: Statement):
        where = st.where()
        left, right, attrs = st.left, st.right, st.attrs
        keys = [key for key, _ in attrs]
        get = lambda name: self.get(name, st)
        if st.fused_qkv:
            extra = set(keys) - {"num_heads", "num_key_value_groups", "axis"}
            if extra:
                raise ValueError(f"{where}: fused_qkv accepts num_heads, num_key_value_groups and axis, "
                                 f"not {', '.join(sorted(extra))}")
            for name, view in zip(right, _fused_qkv(st, get, where)):
                self.put(name, view, st)
            return
        if {"num_heads", "num_key_value_groups"} & set(keys):
            raise ValueError(f"{where}: num_heads / num_key_value_groups go with fused_qkv only")
        if NOTHING in left + right:
            if len(left) != 1 or len(right) != 1 or left == right or attrs:
                raise ValueError(f"{where}: '_' must be a whole side of a statement with one name on each side "
                                 f"and no attributes: `a -> _` (drop a) or `_ -> b` (create b)")
            if right == (NOTHING,):
                get(left[0])
                del self.env[left[0]]
                self.dropped_by[left[0]] = st
                if left[0] in self.source:
                    self.dropped.add(left[0])
            else:
                self.env.pop(right[0], None)
                self.created.add(right[0])
            return
        if len(left) == 1 and len(right) == 1:
            view = get(left[0])
            for key, value in attrs:
                if key == "permute":
                    view = _permute(view, value, where)
                elif key == "dtype":
                    view = _cast(view, value)
                else:  # axis: a split into one part
                    _axis(view, value, where)
            self.put(right[0], view, st)
            return
        if len(left) > 1 and len(right) > 1:
            raise ValueError(f"{where}: {len(left)} names -> {len(right)} names: a statement splits one tensor "
                             f"or concatenates into one tensor (or uses fused_qkv)")
        if keys != ["axis"]:
            raise ValueError(f"{where}: a split or concat takes exactly one attribute, axis=, got "
                             f"{', '.join(keys) or 'none'}; permute or cast in a separate statement")
        axis = attrs[0][1]
        if len(left) == 1:
            for name, view in zip(right, _split(get(left[0]), axis, len(right), where)):
                self.put(name, view, st)
        else:
            self.put(right[0], _concat([get(name) for name in left], axis, where, names=list(left)), st)


# -- the public entry ---------------------------------------------------------------------------------
class Mapping:
    """Where each destination key's data comes from (see build_mapping)."""

    def __init__(self, views: dict, created: frozenset, missing: tuple, dropped: frozenset):
        self._views = views
        self.created = created    # destination keys not to load (`_ -> b`)
        self.missing = missing    # destination keys with no source (sorted)
        self.dropped = dropped    # source keys dropped with `a -> _`

    def _view(self, dst_key: str, where: str) -> View:
        if dst_key not in self._views:
            why = ("is created (`_ -> key`), not loaded" if dst_key in self.created else
                   "has no source (missing)" if dst_key in self.missing else "is not a destination key")
            raise KeyError(f"{where}: {dst_key!r} {why}")
        return self._views[dst_key]

    def pieces(self, dst_key: str, box: tuple) -> list:
        """The pieces covering `box` (a box of dst_key in global coordinates), each cut to the box:
        their dst_boxes tile exactly the part of `box` that the view covers (normally all of it).
        Pieces with empty intersection are omitted. Works for 0-d tensors (box == ())."""
        view = self._view(dst_key, "Mapping.pieces")
        box = tuple((int(start), int(stop)) for start, stop in box)
        if len(box) != len(view.shape) or any(not 0 <= a <= b <= n for (a, b), n in zip(box, view.shape)):
            raise ValueError(f"Mapping.pieces: box {box} is not inside {dst_key!r} of shape {list(view.shape)}; "
                             f"expected one (start, stop) per axis with 0 <= start <= stop <= size")
        out = []
        for piece in view.pieces:
            inter = intersect(box, piece.dst_box)
            if inter is not None:
                out.append(_cut(piece, inter))
        return out

    def dtype_of(self, dst_key: str) -> str:
        """The dtype name the view delivers (the source dtype after casts)."""
        return self._view(dst_key, "Mapping.dtype_of").dtype

    def sources_of(self, dst_key: str) -> set:
        """The source keys the view reads."""
        return {piece.src_key for piece in self._view(dst_key, "Mapping.sources_of").pieces}

    def __repr__(self):
        return (f"Mapping({len(self._views)} loaded, created={sorted(self.created)}, missing={list(self.missing)}, "
                f"dropped={sorted(self.dropped)})")


def _statements_of(aoa_config) -> list:
    accepted = 'None or {"aoa_statements": [str, ...]}'
    if aoa_config is None:
        return []
    if not isinstance(aoa_config, _MappingABC):
        raise TypeError(f"aoa_config must be {accepted}, got {type(aoa_config).__name__}")
    if set(aoa_config) != {"aoa_statements"}:
        raise ValueError(f"aoa_config must be {accepted}, got the keys {sorted(map(str, aoa_config))}")
    statements = aoa_config["aoa_statements"]
    if isinstance(statements, str) or not isinstance(statements, (list, tuple)) or \
            not all(isinstance(s, str) for s in statements):
        raise TypeError(f"aoa_config['aoa_statements'] must be a list of str (one statement each, or several "
                        f"separated by newlines), got {statements!r:.120}")
    return list(statements)


def _specs(specs, name: str) -> dict:
    if not isinstance(specs, _MappingABC):
        raise TypeError(f"build_mapping: {name} must be a dict key -> (global_shape, dtype_name), "
                        f"got {type(specs).__name__}")
    out = {}
    for key, spec in specs.items():
        try:
            shape, dtype = spec
            out[key] = (tuple(int(s) for s in shape), str(dtype))
        except (TypeError, ValueError):
            raise TypeError(f"build_mapping: {name}[{key!r}] must be (global_shape tuple, dtype name), "
                            f"got {spec!r:.120}") from None
    return out


def build_mapping(aoa_config, source: dict, destination: dict) -> Mapping:
    """aoa_config: None or {"aoa_statements": [str, ...]}. source / destination: {key: (global_shape tuple,
    dtype_name str)}. With aoa_config None: identity for every destination key present in source.
    Raises ValueError for bad statements and for a view whose shape is not its destination's;
    destination keys with no source are only reported (Mapping.missing)."""
    texts = _statements_of(aoa_config)
    source, destination = _specs(source, "source"), _specs(destination, "destination")
    run = _Run(source)
    for statement in aoa_syntax.compile_statements(texts, source, destination):
        run.run(statement)
    views, missing = {}, []
    for key, (shape, _) in destination.items():
        if key in run.created:
            continue
        if key not in run.env:
            missing.append(key)
            continue
        view, producer = run.env[key]
        if view.shape != shape:
            by = f"produced by {producer.where()}" if producer else "the source key of the same name"
            raise ValueError(f"build_mapping: destination {key!r} ({by}) has shape {list(view.shape)} in the "
                             f"mapping but {list(shape)} in the destination")
        views[key] = view
    return Mapping(views, frozenset(run.created & set(destination)), tuple(sorted(missing)),
                   frozenset(run.dropped))
