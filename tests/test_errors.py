"""Bad input gets errors that name the op, the argument, what it got and what it accepts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oarlock


@pytest.fixture
def x():
    return oarlock.to_tensor(np.ones((2, 3), np.float32))


def test_unknown_keyword_lists_what_the_op_accepts(x):
    with pytest.raises(TypeError) as info:
        oarlock.sum(x, axes=1)
    text = str(info.value)
    assert "oarlock.sum()" in text and "'axes'" in text and "axis: Axis | None (alias dim)" in text


def test_name_and_alias_together_is_an_error(x):
    with pytest.raises(TypeError, match=r"oarlock.sum\(\): got both 'axis' and its alias 'dim'"):
        oarlock.sum(x, axis=0, dim=0)
    assert oarlock.sum(input=x, dim=0).shape == [3]


def test_wrong_attribute_type_names_argument_and_value(x):
    with pytest.raises(TypeError, match=r"oarlock.sum\(\): argument 'axis' must be an int or a list of ints, "
                                        r"got str 'a'"):
        oarlock.sum(x, axis="a")
    with pytest.raises(TypeError, match=r"argument 'keepdim' must be a bool, got int 1"):
        oarlock.sum(x, keepdim=1)
    with pytest.raises(TypeError, match=r"argument 'dtype' must be a dtype .*got str 'float99'"):
        oarlock.cast(x, "float99")


def test_missing_argument(x):
    with pytest.raises(TypeError, match=r"oarlock.cast\(\) missing required argument 'dtype'"):
        oarlock.cast(x)


def test_non_tensor_where_a_tensor_is_needed(x):
    with pytest.raises(TypeError, match=r"oarlock.cast\(\): argument 'x' must be a Tensor, got list "
                                        r"\(wrap data with oarlock.to_tensor\)"):
        oarlock.cast([1.0, 2.0], "float64")


def test_shapes_that_do_not_broadcast(x):
    y = oarlock.to_tensor(np.ones(4, np.float32))
    with pytest.raises(ValueError) as info:
        x + y
    text = str(info.value)
    assert text.startswith("oarlock.add():") and "shape=[2, 3]" in text and "shape=[4]" in text


def test_bad_shape_attribute(x):
    with pytest.raises(ValueError) as info:
        oarlock.reshape(x, [4, 2])
    text = str(info.value)
    assert "oarlock.reshape()" in text and "(4, 2)" in text and "shape=[2, 3]" in text


def test_missing_kernel_names_device_dtype_and_existing_kernels():
    code = textwrap.dedent('''
        import oarlock
        from oarlock import hookimpl
        from oarlock.plugins import register_plugin

        class Plugin:
            @hookimpl
            def oarlock_register_ops(self, ops):
                ops.define("only_half(x: Tensor) -> Tensor")
                ops.kernel("only_half", device="cpu", dtypes=["float16"])(lambda xp, x: x)

        register_plugin(Plugin(), "half")
        oarlock.only_half(oarlock.ones([2], dtype="float16"))
        try:
            oarlock.only_half(oarlock.ones([2]))
        except NotImplementedError as exc:
            print(exc)
    ''')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("oarlock.only_half(): no kernel for device 'cpu' and dtype float32; "
                                     "kernels that exist: cpu/float16")
