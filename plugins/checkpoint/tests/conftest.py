"""Shared fixtures for the format tests:

pattern_array(name)     awkward bit patterns of any oarlock dtype
bits(array)             a bit-level view, for exact comparison
dtype_name              parametrized over every oarlock dtype
safetensors_dtype_name  parametrized over those safetensors holds
tiny_model              a layer class with parameters and a bfloat16 buffer

flex_models.py (importable from these tests: this folder is put on sys.path) holds the FlexCheckpoint
test models.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import oarlock
from oarlock.dtypes import all_dtypes

sys.path.insert(0, os.path.dirname(__file__))

DTYPE_NAMES = [dt.name for dt in all_dtypes]
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# bfloat16 patterns: quiet NaN, negative NaN with a payload, +inf, -inf, -0, smallest subnormal, largest finite
_BF16_SPECIAL = [0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x7F7F]


def _bits(array) -> np.ndarray:
    """The raw bits of an array, flattened (complex as two floats), so NaN payloads and -0 compare exactly."""
    array = np.asarray(array).reshape(-1)
    if array.dtype.kind == "c":
        array = array.view(np.float32 if array.dtype.itemsize == 8 else np.float64)
    return array.view(_UINT[array.dtype.itemsize]) if array.dtype != np.bool_ else array


def _pattern_array(name: str, seed: int = 0) -> np.ndarray:
    """A [4, 70] array of dtype `name`: random raw bytes (every pattern for the 1-byte floats),
    with bfloat16's special values up front; bools are 0/1."""
    dtype = next(dt.np for dt in all_dtypes if dt.name == name)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, (4, 70)).astype(bool)
    raw = rng.integers(0, 256, 4 * 70 * dtype.itemsize, dtype=np.uint8)
    if dtype.itemsize == 1:
        raw[:256] = np.arange(256)
    array = raw.view(dtype).reshape(4, 70).copy()
    if name == "bfloat16":
        array.reshape(-1)[:len(_BF16_SPECIAL)] = np.array(_BF16_SPECIAL, np.uint16).view(dtype)
    return array


@pytest.fixture(params=DTYPE_NAMES)
def dtype_name(request):
    return request.param


@pytest.fixture(params=[name for name in DTYPE_NAMES if name != "complex128"])
def safetensors_dtype_name(request):
    """Every oarlock dtype safetensors can hold (it has no complex128)."""
    return request.param


@pytest.fixture
def bits():
    return _bits


@pytest.fixture
def pattern_array():
    return _pattern_array


class _Tiny(oarlock.nn.Layer):
    def __init__(self):
        super().__init__()
        self.w = self.create_parameter([3, 4])
        self.b = self.create_parameter([4], is_bias=True)
        self.register_buffer("scale", oarlock.full([4], 0.5, dtype="bfloat16"))

    def forward(self, x):
        return (x @ self.w + self.b) * self.scale.astype("float32")


@pytest.fixture
def tiny_model():
    return _Tiny
