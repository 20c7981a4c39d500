"""Public namespaces resolve lazily from the registry and list what is there."""

import pytest

import oarlock
import oarlock.linalg
import oarlock.nn.functional as F


def test_dir_lists_registry_names():
    names = dir(oarlock)
    assert "add" in names and "Tensor" in names and "to_tensor" in names
    assert "relu" in dir(F)
    assert "sum" in dir(oarlock.to_tensor([1.0]))


def test_lazy_names_are_cached_after_first_use():
    fn = oarlock.add
    assert oarlock.__dict__["add"] is fn and oarlock.add is fn


def test_unknown_name_says_no_plugin_exports_it():
    with pytest.raises(AttributeError, match="oarlock.nn.functional.no_such_function"):
        _ = oarlock.nn.functional.no_such_function


def test_tensor_methods_come_from_the_registry():
    x = oarlock.to_tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.sum().item() == 10.0 and x.reshape([4]).shape == [4]
    with pytest.raises(AttributeError, match="no_such_method"):
        _ = x.no_such_method
