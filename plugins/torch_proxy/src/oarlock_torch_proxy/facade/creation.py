"""torch's tensor-creation and random functions over oarlock: sizes as varargs or a sequence, `dtype`,
`device`, `requires_grad`, `generator` and `out`-less forms, torch's dtype rules (torch.full(.., 3) is int64),
and torch.Generator / manual_seed."""

from __future__ import annotations

import builtins

import numpy as np
import oarlock

from oarlock_torch_proxy.facade import dtypes


def _sizes(size, name):
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = size[0]
    if not all(isinstance(d, (builtins.int, np.integer)) or (isinstance(d, oarlock.Tensor) and d.ndim == 0)
               for d in size):
        raise TypeError(f"torch.{name}(): size must be ints (varargs or one sequence), got {size!r}")
    return [builtins.int(d) for d in size]


def _finish(t, requires_grad):
    if requires_grad:
        t.stop_gradient = False
    return t


def _into(out, result):
    """torch's out=: `out` takes the result's shape and values in place, keeps its own dtype, and is returned."""
    if out is None:
        return result
    from oarlock.plugin_api import array_of, rebind
    rebind(out, array_of(result.detach().astype(out.dtype)))
    return out


class Generator:
    """torch.Generator: an independent seeded stream (numpy's PCG64) for the random functions that take
    `generator=`; manual_seed returns the generator, as torch's does."""

    def __init__(self, device="cpu"):
        self._device = device   # parsed on first read: importing the façade needs no device plugin
        self._seed = 67280421310721
        self._rng = np.random.default_rng(self._seed)

    @property
    def device(self):
        return dtypes.device(self._device)

    def manual_seed(self, seed):
        self._seed = builtins.int(seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self):
        return self.manual_seed(np.random.SeedSequence().entropy % (2 ** 63))._seed

    def initial_seed(self):
        return self._seed

    def get_state(self):
        return self._rng.bit_generator.state

    def set_state(self, state):
        self._rng.bit_generator.state = state
        return self


default_generator = Generator()
_initial_seed = [0]


def manual_seed(seed):
    oarlock.seed(builtins.int(seed))
    default_generator.manual_seed(seed)
    _initial_seed[0] = builtins.int(seed)
    return default_generator


def seed():
    return default_generator.seed()


def initial_seed():
    return _initial_seed[0]


def get_rng_state():
    return oarlock.get_rng_state()


def set_rng_state(state):
    oarlock.set_rng_state(state)


def _from_generator(generator, draw, shape, dtype, requires_grad):
    values = draw(generator._rng, shape).astype(np.float64)
    return _finish(oarlock.to_tensor(values).astype(dtype or dtypes.get_default_dtype()), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False, out=None, layout=None, pin_memory=False):
    return _into(out, _finish(oarlock.zeros(_sizes(size, "zeros"), dtype=dtype), requires_grad))


def ones(*size, dtype=None, device=None, requires_grad=False, out=None, layout=None, pin_memory=False):
    return _into(out, _finish(oarlock.ones(_sizes(size, "ones"), dtype=dtype), requires_grad))


def empty(*size, dtype=None, device=None, requires_grad=False, out=None, layout=None, pin_memory=False,
          memory_format=None):
    return _into(out, _finish(oarlock.zeros(_sizes(size, "empty"), dtype=dtype), requires_grad))


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False, out=None, layout=None,
         pin_memory=False):
    if dtype is None:   # torch infers the dtype from the fill value
        dtype = (dtypes.bool if isinstance(fill_value, builtins.bool) else dtypes.int64
                 if isinstance(fill_value, builtins.int) else None)
    return _into(out, _finish(oarlock.full(_sizes((size,), "full"), fill_value, dtype=dtype), requires_grad))


def zeros_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    return _finish(oarlock.zeros(input.shape, dtype=dtype or input.dtype), requires_grad)


def ones_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    return _finish(oarlock.ones(input.shape, dtype=dtype or input.dtype), requires_grad)


empty_like = zeros_like


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None,
              memory_format=None):
    return _finish(oarlock.full(input.shape, fill_value, dtype=dtype or input.dtype), requires_grad)


def randn_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    return randn(*input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)


def rand_like(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
    return rand(*input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False, layout=None,
                 memory_format=None):
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False, out=None, layout=None,
          pin_memory=False):
    shape = _sizes(size, "randn")
    if generator is not None:
        return _into(out, _from_generator(generator, lambda r, s: r.standard_normal(s), shape, dtype, requires_grad))
    return _into(out, _finish(oarlock.randn(shape, dtype=dtype), requires_grad))


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False, out=None, layout=None,
         pin_memory=False):
    shape = _sizes(size, "rand")
    if generator is not None:
        return _into(out, _from_generator(generator, lambda r, s: r.random(s), shape, dtype, requires_grad))
    return _into(out, _finish(oarlock.rand(shape, dtype=dtype), requires_grad))


def randint(low=0, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad=False,
            out=None):
    if size is None:   # randint(high, size)
        low, high, size = 0, low, high
    shape = _sizes((size,), "randint")
    if generator is not None:
        return _into(out, oarlock.to_tensor(generator._rng.integers(low, high, shape)).astype(dtype or dtypes.int64))
    drawn = oarlock.randint(low, high, shape, dtype=dtypes.int64)   # torch also draws into float dtypes
    return _into(out, drawn if dtype is None or dtype == dtypes.int64 else drawn.astype(dtype))


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, out=None):
    if generator is not None:
        return _into(out, oarlock.to_tensor(generator._rng.permutation(n)).astype(dtype or dtypes.int64))
    return _into(out, oarlock.randperm(n, dtype=dtype or dtypes.int64))


def normal(mean, std=1.0, size=None, *, generator=None, out=None):
    if size is not None:
        return _into(out, oarlock.normal(mean, std, _sizes((size,), "normal")))
    return _into(out, oarlock.normal(mean, std))


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    return _into(out, oarlock.multinomial(input, num_samples, replacement=replacement))


def bernoulli(input, p=None, *, generator=None, out=None):
    probs = input if p is None else oarlock.full(input.shape, p, dtype=input.dtype)
    return _into(out, oarlock.bernoulli(probs))


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False, out=None, layout=None):
    if end is None:
        start, end = 0, start
    values = [start, end, step]
    if dtype is None and all(isinstance(v, (builtins.int, np.integer)) for v in values):
        dtype = dtypes.int64
    made = oarlock.arange(start, end, step, dtype=dtype or dtypes.get_default_dtype())
    return _into(out, _finish(made, requires_grad))


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False, out=None, layout=None):
    """torch's linspace, value for value: start + i * step for the first half and end - (steps - 1 - i) * step
    for the second, in the output dtype's own arithmetic (numpy's rounds differently in the last bit, which
    large multipliers such as rotary frequencies turn into visible differences)."""
    dt = np.dtype((dtype or dtypes.get_default_dtype()).name) if (dtype or dtypes.get_default_dtype()).name in (
        "float32", "float64", "float16") else None
    if dt is None:
        return _into(out, _finish(oarlock.linspace(start, end, steps, dtype=dtype), requires_grad))
    if steps == 1:
        values = np.array([start], dtype=dt)
    else:
        i = np.arange(steps)
        step = (dt.type(end) - dt.type(start)) / dt.type(steps - 1)
        values = np.where(i < steps // 2, dt.type(start) + step * i.astype(dt),
                          dt.type(end) - step * (steps - 1 - i).astype(dt)).astype(dt)
    return _into(out, _finish(oarlock.to_tensor(values), requires_grad))


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False, out=None):
    return _into(out, _finish(oarlock.logspace(start, end, steps, base=base, dtype=dtype), requires_grad))


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, out=None, layout=None):
    return _into(out, _finish(oarlock.eye(n, m, dtype=dtype), requires_grad))


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """torch.tensor: a copy of `data` (Python numbers, lists, numpy arrays, Tensors); floats give the default
    dtype, ints int64, bools bool."""
    if isinstance(data, oarlock.Tensor):
        t = data.detach().clone()
        t = t if dtype is None else t.astype(dtype)
    elif isinstance(data, (list, tuple)) and any(isinstance(v, oarlock.Tensor) for v in data):
        t = oarlock.stack([tensor(v, dtype=dtype) for v in data])
    else:
        t = oarlock.tensor(data, dtype=dtype)
    return _finish(t, requires_grad)


def as_tensor(data, dtype=None, device=None):
    if isinstance(data, oarlock.Tensor):
        return data if dtype is None or data.dtype == dtype else data.astype(dtype)
    return tensor(data, dtype=dtype)


def from_numpy(array):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"torch.from_numpy(): expected an np.ndarray, got {type(array).__name__}")
    return oarlock.to_tensor(array)


def scalar_tensor(value, *, dtype=None, device=None, requires_grad=False):
    return _finish(oarlock.full([], value, dtype=dtype or dtypes.get_default_dtype()), requires_grad)
