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



class _Recorded:
    """An array-like that records the thread that reads it."""

    def __init__(self, array):
        self.array, self.readers = array, []

    def __array__(self, dtype=None, copy=None):
        import threading
        self.readers.append(threading.current_thread().name)
        return self.array


def test_asynchronous_copies_run_on_the_copy_worker_and_are_counted():
    """copy_to_host_async copies into the host pool on the copy worker thread; copy_to_device_async's array is a
    numpy allocation made there, still counted by memory_allocated (the worker installs the counting allocator)."""
    backend = default_registry().backends["cpu"]
    device = oarlock.device
    source = np.random.default_rng(1).standard_normal((512, 64))[:, ::2]        # not contiguous
    gc.collect()
    before, host_before = device.memory_allocated("cpu"), device.host_memory_allocated("cpu")
    recorded = _Recorded(source)
    host = backend.copy_to_host_async(recorded).wait()
    assert recorded.readers == ["oarlock-cpu-copy_0"]
    assert device.host_memory_allocated("cpu") - host_before == source.nbytes
    np.testing.assert_array_equal(host, source)
    back = backend.copy_to_device_async(host).wait()
    np.testing.assert_array_equal(back, source)
    assert back is not host and device.memory_allocated("cpu") - before >= source.nbytes
