"""Where the samplers and random_split draw their randomness.

`generator=None` draws a fresh seed from oarlock's cpu generator each time
an order is needed (each epoch), as torch does with its default generator:
`oarlock.seed(n)` then makes every shuffle reproducible, and the samplers
keep no random state of their own. A `numpy.random.Generator` is used as
is, the counterpart of torch's `generator=` argument.
"""

from __future__ import annotations

import numpy as np

import oarlock

_SEED_HIGH = 2**63 - 1


def draw_seed() -> int:
    """A 63-bit seed from oarlock's cpu generator."""
    return int(oarlock.randint(0, _SEED_HIGH, [1], dtype="int64", place="cpu").item())


def is_index_iterator(generator) -> bool:
    """Paddle's RandomSampler form: `generator` is an iterator that yields the indices itself."""
    return not isinstance(generator, np.random.Generator) and hasattr(generator, "__next__")


def check_generator(where: str, generator, iterator_ok: bool = False):
    """`generator` if it is None or a numpy.random.Generator (or, where `iterator_ok`, an iterator of
    indices); else a TypeError naming `where`."""
    if generator is None or isinstance(generator, np.random.Generator) or (iterator_ok and
                                                                           is_index_iterator(generator)):
        return generator
    also = ", or an iterator of indices" if iterator_ok else ""
    raise TypeError(f"{where}: generator must be None (draw from oarlock's cpu generator, seeded by "
                    f"oarlock.seed) or a numpy.random.Generator{also}, got {type(generator).__name__} {generator!r}")


def numpy_rng(generator, where: str) -> np.random.Generator:
    """The numpy Generator `generator=` stands for; `where` names the caller in errors."""
    check_generator(where, generator)
    return np.random.default_rng(draw_seed()) if generator is None else generator
