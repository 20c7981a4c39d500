"""N-d boxes: the regions of a global tensor that shards hold and loads ask for.

A box is a tuple of half-open (start, stop) ranges, one per axis; a 0-d
tensor's box is (). Boxes are plain tuples so they pickle, hash and compare
cheaply, and travel in the metadata as lists.
"""

from __future__ import annotations

import math

Box = tuple  # tuple[tuple[int, int], ...]


def box_of(offset, shape) -> Box:
    """The box at `offset` with extent `shape`."""
    return tuple((int(o), int(o) + int(s)) for o, s in zip(offset, shape))


def whole(shape) -> Box:
    return tuple((0, int(s)) for s in shape)


def shape_of(box: Box) -> tuple:
    return tuple(stop - start for start, stop in box)


def offset_of(box: Box) -> tuple:
    return tuple(start for start, _ in box)


def volume(box: Box) -> int:
    return math.prod(stop - start for start, stop in box)


def intersect(a: Box, b: Box) -> Box | None:
    """The common part of two boxes of one tensor, None when they do not overlap (or either is empty)."""
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo, hi = max(a0, b0), min(a1, b1)
        if lo >= hi:
            return None
        out.append((lo, hi))
    if volume(a) == 0 or volume(b) == 0:
        return None
    return tuple(out)


def relative(box: Box, origin: Box) -> Box:
    """`box` in the coordinates of `origin` (which contains it)."""
    return tuple((start - o, stop - o) for (start, stop), (o, _) in zip(box, origin))


def shift(box: Box, origin: Box) -> Box:
    """The inverse of relative(): a box given inside `origin` in the outer coordinates."""
    return tuple((start + o, stop + o) for (start, stop), (o, _) in zip(box, origin))


def slices(box: Box) -> tuple:
    """numpy index for the box."""
    return tuple(slice(start, stop) for start, stop in box)


def contains(outer: Box, inner: Box) -> bool:
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))
