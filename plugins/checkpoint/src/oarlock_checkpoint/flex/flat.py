"""Flattened shards (Paddle's is_flattened / flattened_range) as n-d boxes.

A flattened ShardedWeight holds the elements [start, stop) of the row-major
flattening of an n-d box (its local_shape at its global_offset), as a 1-D
local tensor: sharding stage 2/3 keep such flat ranges of flattened
parameters. FlexCheckpoint stores and requests n-d boxes only, so a range is
cut into the few boxes it covers, in order: a partial first row, a block of
whole rows, a partial last row, the partial rows cut the same way one axis
down (at most 2 * ndim - 1 boxes). Each box is itself a contiguous run of the
flattening, so its values are a slice of the 1-D tensor reshaped to the box.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from oarlock_checkpoint.flex.boxes import Box, box_of

__all__ = ["decompose", "flat_pieces"]


def decompose(shape, start: int, stop: int) -> list[Box]:
    """The boxes (in the coordinates of a tensor of `shape`) that the elements [start, stop) of its
    row-major flattening fill, in flattening order; [] for an empty range."""
    shape = tuple(int(n) for n in shape)
    if not 0 <= start <= stop <= math.prod(shape):
        raise ValueError(f"decompose(): range [{start}, {stop}) is not inside the {math.prod(shape)} elements of "
                         f"shape {list(shape)}")
    return list(_boxes(shape, start, stop)) if start < stop else []


def _boxes(shape: tuple, start: int, stop: int) -> Iterator[Box]:
    if not shape:   # a 0-d tensor: its one element
        yield ()
        return
    row = math.prod(shape[1:])       # elements per index of the first axis
    first_whole = -(-start // row)   # the first row the range holds whole ...
    end_whole = stop // row          # ... and the end of the whole rows
    rest = tuple((0, n) for n in shape[1:])
    if first_whole > end_whole:      # start and stop inside one row: cut that row one axis down
        yield from _in_row(shape, start // row, start % row, stop % row)
        return
    if start < first_whole * row:    # the partial first row
        yield from _in_row(shape, start // row, start % row, row)
    if first_whole < end_whole:
        yield ((first_whole, end_whole),) + rest
    if end_whole * row < stop:       # the partial last row
        yield from _in_row(shape, end_whole, 0, stop - end_whole * row)


def _in_row(shape: tuple, index: int, start: int, stop: int) -> Iterator[Box]:
    for box in _boxes(shape[1:], start, stop):
        yield ((index, index + 1),) + box


def flat_pieces(local_shape, global_offset, start: int, stop: int) -> list[tuple[Box, tuple[int, int]]]:
    """[(box of the global tensor, (first, end) of its elements in the 1-D local tensor)] for the flat
    range [start, stop) of the box `local_shape` at `global_offset`."""
    strides = [math.prod(local_shape[axis + 1:]) for axis in range(len(local_shape))]
    out = []
    for box in decompose(local_shape, start, stop):
        first = sum(lo * stride for (lo, _), stride in zip(box, strides)) - start
        extent = math.prod(hi - lo for lo, hi in box)
        shifted = box_of([o + lo for o, (lo, _) in zip(global_offset, box)], [hi - lo for lo, hi in box])
        out.append((shifted, (first, first + extent)))
    return out
