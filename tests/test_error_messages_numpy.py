"""Bad input that numpy (or Python) refuses under an op gives an error naming the op and, where the
dispatcher can tell, the argument (issue 16, finding 8): allocation failures say how many bytes were
asked for in human units, overflowing ints name the value and the dtype's range. Before, 28 such
inputs surfaced numpy's bare text ("Python int too large to convert to C long", "Unable to allocate
3.64 TiB ..."). Every message here must start with the op's name, never with numpy's text.

The huge sizes ask for petabytes, which no machine grants, so nothing is ever allocated.
"""

from __future__ import annotations

import pytest

import oarlock
from oarlock.dtypes import ScalarConversionError

BIG = 1 << 50      # elements: 4 PiB of float32
NAN, INF = float("nan"), float("inf")


def _x():
    return oarlock.ones([2, 3])


# (name, call, exception type, the op's name the message starts with, the argument it must name as
# "argument 'name'" -- not merely inside the attributes it lists --, further words it must hold)
CASES = [
    ("zeros_huge", lambda: oarlock.zeros([BIG, 4]), MemoryError, "oarlock.zeros()", "shape", ("16.00 PiB",)),
    ("ones_beyond_addressable", lambda: oarlock.ones([1 << 62]), ValueError, "oarlock.ones()",
     "shape", ("too large",)),
    ("ones_beyond_uint64", lambda: oarlock.ones([1 << 64]), ValueError, "oarlock.ones()", "shape", ()),
    ("full_huge", lambda: oarlock.full([BIG], 1.0), MemoryError, "oarlock.full()", "shape", ("4.00 PiB",)),
    ("empty_huge", lambda: oarlock.empty([BIG]), MemoryError, "oarlock.empty()", "shape", ("bytes",)),
    ("rand_huge", lambda: oarlock.rand([BIG]), MemoryError, "oarlock.rand()", "shape", ("float32",)),
    ("randn_huge", lambda: oarlock.randn([2, BIG]), MemoryError, "oarlock.randn()", "shape", ()),
    ("randint_huge", lambda: oarlock.randint(0, 5, [BIG]), MemoryError, "oarlock.randint()", "shape", ("int64",)),
    ("randperm_huge", lambda: oarlock.randperm(BIG), MemoryError, "oarlock.randperm()", "n", ()),
    ("eye_huge", lambda: oarlock.eye(BIG), ValueError, "oarlock.eye()", "num_rows", ()),
    ("arange_huge", lambda: oarlock.arange(0, 1 << 60), ValueError, "oarlock.arange()", "end", ()),
    ("arange_nan", lambda: oarlock.arange(0, NAN), ValueError, "oarlock.arange()", "end", ("nan",)),
    ("arange_inf", lambda: oarlock.arange(0, INF), ValueError, "oarlock.arange()", "end", ("inf",)),
    ("arange_step_0", lambda: oarlock.arange(0, 5, 0), ValueError, "oarlock.arange()", "step", ()),
    ("range_huge", lambda: oarlock.range(0, 1 << 60), MemoryError, "oarlock.range()", "end", ("EiB",)),
    ("linspace_huge", lambda: oarlock.linspace(0, 1, 1 << 60), ValueError, "oarlock.linspace()", "num", ()),
    ("linspace_nan_count", lambda: oarlock.linspace(0, 1, NAN), ValueError, "oarlock.linspace()", "num", ("nan",)),
    ("linspace_negative_count", lambda: oarlock.linspace(0, 1, -3), ValueError, "oarlock.linspace()", "num", ()),
    ("reshape_beyond_uint64", lambda: oarlock.reshape(_x(), [1 << 64]), ValueError, "oarlock.reshape()",
     "shape", ()),
    ("tile_huge", lambda: oarlock.tile(_x(), [BIG, 2]), MemoryError, "oarlock.tile()", "repeat_times", ()),
    ("expand_huge", lambda: oarlock.expand(_x(), [BIG, 2, 3]), MemoryError, "oarlock.expand()", "shape", ()),
    ("repeat_interleave_huge", lambda: oarlock.repeat_interleave(_x(), BIG), MemoryError,
     "oarlock.repeat_interleave()", "repeats", ()),
    ("to_tensor_2_63", lambda: oarlock.to_tensor([2 ** 63]), ScalarConversionError, "oarlock.to_tensor()",
     "data", ("9223372036854775808", "int64", "9223372036854775807")),
    ("to_tensor_minus_2_64", lambda: oarlock.to_tensor(-2 ** 64), ScalarConversionError, "oarlock.to_tensor()",
     "data", ("-18446744073709551616", "int64")),
    ("to_tensor_ragged", lambda: oarlock.to_tensor([[1, 2], [3]]), ValueError, "oarlock.to_tensor()", "data", ()),
    ("to_tensor_strings", lambda: oarlock.to_tensor(["a"]), TypeError, "oarlock.to_tensor()", "data", ()),
    ("full_2_63", lambda: oarlock.full([2], 2 ** 63, dtype="int64"), ScalarConversionError, "oarlock.full()",
     "fill_value", ("int64",)),
    ("fill_2_63", lambda: oarlock.zeros([2], dtype="int64").fill_(2 ** 63), ScalarConversionError, "Tensor.fill_()",
     "value", ("int64",)),
    ("fill_minus_2_64", lambda: oarlock.zeros([2], dtype="int32").fill_(-2 ** 64), ScalarConversionError,
     "Tensor.fill_()", "value", ("int32",)),
    ("multiply_int32_by_2_40", lambda: oarlock.ones([2], dtype="int32") * 2 ** 40, ScalarConversionError,
     "oarlock.multiply()", "y", ("int32",)),
    ("add_int64_2_64", lambda: oarlock.add(oarlock.ones([2], dtype="int64"), 2 ** 64), ScalarConversionError,
     "oarlock.add()", "y", ("int64",)),
    ("dtype_typo", lambda: oarlock.zeros([2], dtype="flaot32"), TypeError, "oarlock.zeros()", "dtype", ("flaot32",)),
    ("astype_unknown", lambda: _x().astype("int33"), TypeError, "oarlock.cast()", "dtype", ("int33",)),
    ("to_tensor_dtype", lambda: oarlock.to_tensor([1], dtype="foo"), TypeError, "oarlock.to_tensor()", "dtype", ()),
    ("negative_size", lambda: oarlock.zeros([2, -3]), ValueError, "oarlock.zeros()", "shape", ("[2, -3]",)),
    ("negative_size_rand", lambda: oarlock.rand([-1]), ValueError, "oarlock.rand()", "shape", ()),
    ("float_size", lambda: oarlock.ones([2.5]), TypeError, "oarlock.ones()", "shape", ("2.5",)),
]


@pytest.mark.parametrize("name,call,error,op,arg,words", CASES, ids=[c[0] for c in CASES])
def test_error_names_the_op_and_argument(name, call, error, op, arg, words):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert message.startswith(op + ":"), f"the message should start with {op!r}: {message}"
    for word in (f"argument '{arg}'", *words):
        assert word in message, f"the message should hold {word!r}: {message}"


def test_a_huge_input_is_not_printed_whole():
    """The attributes in a message are shortened: a to_tensor of 100000 values does not print them all."""
    with pytest.raises(ScalarConversionError) as info:
        oarlock.to_tensor([1.0] * 100_000 + [NAN], dtype="int32")
    assert len(str(info.value)) < 1000
