"""The cpu host pool (pin_memory on the "cpu" backend): copies counted by oarlock.device.host_memory_allocated and
not by memory_allocated, uncounted when collected; the peak and its reset."""

import gc

import numpy as np

import oarlock
from oarlock.plugin_api import default_registry


def test_host_copies_are_counted_apart_from_device_memory():
    backend = default_registry().backends["cpu"]
    device = oarlock.device
    source = np.random.default_rng(0).standard_normal((256, 129)).astype("float32")
    gc.collect()
    before, host_before = device.memory_allocated("cpu"), device.host_memory_allocated("cpu")
    device.reset_max_host_memory_allocated("cpu")
    copies = [backend.pin_memory(source), backend.pin_memory(source[:, ::2])]
    assert device.memory_allocated("cpu") - before == 0          # nothing numpy allocated
    assert device.host_memory_allocated("cpu") - host_before == source.nbytes + source[:, ::2].nbytes
    np.testing.assert_array_equal(copies[0], source)
    np.testing.assert_array_equal(copies[1], source[:, ::2])
    assert copies[1].flags.c_contiguous and copies[0].flags.writeable
    view = copies[0][3:5]
    del copies
    gc.collect()
    # the first block lives on through its view; the second is gone
    assert device.host_memory_allocated("cpu") - host_before == source.nbytes
    del view
    gc.collect()
    assert device.host_memory_allocated("cpu") == host_before
    assert device.max_host_memory_allocated("cpu") - host_before == source.nbytes + source[:, ::2].nbytes
    device.reset_max_host_memory_allocated("cpu")
    assert device.max_host_memory_allocated("cpu") == host_before
    assert backend.pin_memory(np.zeros((0, 3), "float64")).shape == (0, 3)
