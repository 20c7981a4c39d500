"""The per-device random generator of the "gpu" device: counter-based SplitMix64, state (seed, offset).

Draw number k of a generator seeded with s is mix64(key + (k + 1) * GOLDEN) with key = mix64(s): the
SplitMix64 sequence (Steele, Lea and Flood 2014; the seeder of numpy's SeedSequence family and of
java.util.SplittableRandom), indexed directly by k instead of stepped. So each element of a draw is
computed on its own GPU thread, and the whole state is two integers, like Paddle's CUDA generator
(seed, offset): get_rng_state/set_rng_state copy two numbers, never a device buffer.

`CounterGenerator` offers the numpy.random.Generator methods the ops call (random, standard_normal,
integers) and a few more (uniform, normal, permutation). Arrays come from an engine: `CupyEngine`
runs one elementwise CUDA kernel per draw; `NumpyEngine` computes the same numbers on the host (the
reference the GPU tests compare against, and what a draw with size=None uses, so a scalar needs no
device round trip). Conversions, identical in both engines:
- random: float64 = (bits >> 11) * 2**-53, float32 = (bits >> 40) * 2**-24, in [0, 1);
- standard_normal: Box-Muller on draws 2i and 2i+1, in float64, then cast (2 draws per value);
- integers: low + bits % (high - low) (bias below (high - low) / 2**64).
"""

from __future__ import annotations

import threading

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
ALGORITHM = "oarlock.splitmix64"


def mix64(z: int) -> int:
    """SplitMix64's output function on a Python int (mod 2**64)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def key_of(seed: int) -> int:
    return mix64(seed & MASK64)


def _shape(size) -> tuple[int, ...]:
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


def _count(shape) -> int:
    n = 1
    for s in shape:
        if s < 0:
            raise ValueError(f"negative dimensions are not allowed, got size {list(shape)}")
        n *= s
    return n


def _float_dtype(dtype, method: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{method}(): dtype must be float32 or float64, got {dtype}")
    return dtype


# -- the host engine: the reference ------------------------------------------------------------------

class NumpyEngine:
    """The generator's numbers computed with numpy on the host."""

    xp = np

    @staticmethod
    def bits(key: int, offset: int, n: int, stride: int = 1, start: int = 0) -> np.ndarray:
        """Draws offset + start + stride*i for i < n, as uint64."""
        counters = np.arange(n, dtype=np.uint64) * np.uint64(stride) + np.uint64((offset + start) & MASK64)
        z = np.uint64(key) + (counters + np.uint64(1)) * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def random(self, key, offset, shape, dtype):
        n = _count(shape)
        z = self.bits(key, offset, n)
        if dtype == np.float32:
            out = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
        else:
            out = (z >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
        return out.reshape(shape)

    def standard_normal(self, key, offset, shape, dtype):
        n = _count(shape)
        u1 = ((self.bits(key, offset, n, 2, 0) >> np.uint64(11)).astype(np.float64) + 1.0) * (2.0 ** -53)
        u2 = (self.bits(key, offset, n, 2, 1) >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
        return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(dtype).reshape(shape)

    def integers(self, key, offset, shape, dtype, span, low):
        z = self.bits(key, offset, _count(shape))
        return ((z % np.uint64(span)) + np.uint64(low & MASK64)).astype(np.int64).astype(dtype).reshape(shape)


# -- the device engine: one CUDA kernel per draw -----------------------------------------------------

_PREAMBLE = r"""
__device__ __forceinline__ unsigned long long oarlock_splitmix(unsigned long long key, unsigned long long k) {
    unsigned long long z = key + (k + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
"""

_RANDOM = r"""
unsigned long long z = oarlock_splitmix(key, offset + (unsigned long long)i);
if (sizeof(T) == 4) {
    out = (T)((float)(z >> 40) * 5.9604644775390625e-08f);
} else {
    out = (T)((double)(z >> 11) * 1.1102230246251565e-16);
}
"""

_NORMAL = r"""
unsigned long long k = offset + 2ULL * (unsigned long long)i;
double u1 = ((double)(oarlock_splitmix(key, k) >> 11) + 1.0) * 1.1102230246251565e-16;
double u2 = (double)(oarlock_splitmix(key, k + 1ULL) >> 11) * 1.1102230246251565e-16;
out = (T)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
"""

_INTEGERS = r"""
unsigned long long z = oarlock_splitmix(key, offset + (unsigned long long)i);
out = (T)(long long)(z % span + low);
"""


class CupyEngine:
    """The generator's numbers computed on GPU `index` by elementwise kernels (compiled on first use)."""

    _kernels: dict = {}

    def __init__(self, cupy, index: int):
        self.xp, self.index = cupy, index

    def _kernel(self, name, params, body):
        kernel = CupyEngine._kernels.get(name)
        if kernel is None:
            kernel = CupyEngine._kernels[name] = self.xp.ElementwiseKernel(
                params, "T out", body, name=f"oarlock_{name}", preamble=_PREAMBLE)
        return kernel

    def _run(self, name, params, body, shape, dtype, *scalars):
        cupy = self.xp
        with cupy.cuda.Device(self.index):
            out = cupy.empty(shape, dtype=dtype)
            if out.size:
                self._kernel(name, params, body)(*scalars, out)
            return out

    def random(self, key, offset, shape, dtype):
        return self._run("random", "uint64 key, uint64 offset", _RANDOM, shape, dtype,
                         np.uint64(key), np.uint64(offset & MASK64))

    def standard_normal(self, key, offset, shape, dtype):
        return self._run("standard_normal", "uint64 key, uint64 offset", _NORMAL, shape, dtype,
                         np.uint64(key), np.uint64(offset & MASK64))

    def integers(self, key, offset, shape, dtype, span, low):
        return self._run("integers", "uint64 key, uint64 offset, uint64 span, uint64 low", _INTEGERS, shape,
                         dtype, np.uint64(key), np.uint64(offset & MASK64), np.uint64(span), np.uint64(low & MASK64))


# -- the generator -------------------------------------------------------------------------------------

class CounterGenerator:
    """A numpy.random.Generator-like generator with state (seed, offset); arrays from `engine`."""

    _host = NumpyEngine()

    def __init__(self, seed: int = 0, engine=None):
        self.engine = engine if engine is not None else self._host
        # Threads share a device's generator (as in Paddle and PyTorch): the lock makes taking a range of
        # draw numbers, seeding and reading or writing the state atomic, so no two draws get the same
        # numbers and no state is read half-updated. The numbers are computed outside it. Re-entrant and
        # public, like numpy's BitGenerator.lock: a kernel drawing in blocks holds it across them.
        self.lock = threading.RLock()
        self.seed(seed)

    # -- state ---------------------------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        with self.lock:
            self._seed, self._key, self.offset = int(seed), key_of(int(seed)), 0

    @property
    def state(self) -> dict:
        with self.lock:
            return {"bit_generator": ALGORITHM, "seed": self._seed, "offset": self.offset}

    @state.setter
    def state(self, state) -> None:
        if not isinstance(state, dict) or state.get("bit_generator") != ALGORITHM \
                or not isinstance(state.get("seed"), int) or not isinstance(state.get("offset"), int):
            raise ValueError(f"set_rng_state(): a gpu generator state is a dict {{'bit_generator': {ALGORITHM!r}, "
                             f"'seed': int, 'offset': int}} as get_rng_state returns, got {state!r}")
        seed = int(state["seed"])
        with self.lock:
            self._seed, self._key, self.offset = seed, key_of(seed), state["offset"]

    def _advance(self, n: int) -> tuple[int, int]:
        """(key, first draw number) of the next n draws, which it takes."""
        with self.lock:
            offset = self.offset
            self.offset = (offset + n) & MASK64
            return self._key, offset

    def _draw(self, method, size, dtype, per_value, *args):
        """`per_value` draws per output value; size None: one value, computed on the host."""
        shape = () if size is None else _shape(size)
        key, offset = self._advance(per_value * _count(shape))
        if size is None:
            return getattr(self._host, method)(key, offset, (1,), dtype, *args)[0]
        return getattr(self.engine, method)(key, offset, shape, dtype, *args)

    # -- numpy.random.Generator methods ------------------------------------------------------------------
    def random(self, size=None, dtype=np.float64):
        """Floats in [0, 1)."""
        return self._draw("random", size, _float_dtype(dtype, "random"), 1)

    def standard_normal(self, size=None, dtype=np.float64):
        return self._draw("standard_normal", size, _float_dtype(dtype, "standard_normal"), 2)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        """Integers in [low, high) ([low, high] with endpoint=True); high None: [0, low)."""
        if high is None:
            low, high = 0, low
        low, high = int(low), int(high) + (1 if endpoint else 0)
        if high <= low:
            raise ValueError(f"integers(): low >= high (low={low}, high={high - (1 if endpoint else 0)})")
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu":
            raise TypeError(f"integers(): dtype must be an integer type, got {dtype}")
        info = np.iinfo(dtype)
        if low < info.min or high - 1 > info.max:
            raise ValueError(f"integers(): [{low}, {high}) does not fit dtype {dtype}")
        return self._draw("integers", size, dtype, 1, high - low, low)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        """Floats in [low, high)."""
        return self._affine(self.random(size, dtype), low, high - low, size, dtype)

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
        return self._affine(self.standard_normal(size, dtype), loc, scale, size, dtype)

    @staticmethod
    def _affine(values, shift, scale, size, dtype):
        out = shift + scale * values
        return np.dtype(dtype).type(out) if size is None else out.astype(dtype, copy=False)

    def permutation(self, x):
        """A shuffled arange(x) for an int, else a shuffled copy of the array along its first axis."""
        xp = self.engine.xp
        n = int(x) if isinstance(x, (int, np.integer)) else len(x)
        order = xp.argsort(self.random(n))
        return order if isinstance(x, (int, np.integer)) else x[order]

    def __repr__(self):
        return f"CounterGenerator(seed={self._seed}, offset={self.offset}, engine={type(self.engine).__name__})"
