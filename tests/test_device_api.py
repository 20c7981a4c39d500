"""The device API of the core (oarlock.device): streams and events on a synchronous device, memory
statistics and control, the custom-device queries, device strings "name:N" wherever a device is
accepted, and the errors for an unknown device, an index out of range, an unusable gpu and an op on
two devices. A fake two-device type "testdev" (numpy arrays, cpu kernels through its parent) is added
to the process registry for the tests that need several devices, and removed after them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import oarlock
import oarlock.device as device
from oarlock.registry import default_registry
from oarlock.device import Backend, Event, Stream, current_stream, set_stream, stream_guard


# -- a fake custom device with two indices ------------------------------------------------------------------

class TwoDeviceBackend(Backend):
    type, parent, xp, array_types = "testdev", "cpu", np, (np.ndarray,)

    def __init__(self):
        self.current = 0
        self.synchronized = []
        self._generator = np.random.default_rng(0)

    def device_count(self):
        return 2

    def set_current_device(self, index):
        self.current = index

    def asarray(self, data, dtype=None, index=0):
        return np.asarray(data, dtype=dtype)

    def to_host(self, array):
        return np.asarray(array)

    def generator(self, index=0):
        return self._generator

    def seed(self, seed):
        self._generator = np.random.default_rng(seed)

    def synchronize(self, index=0):
        self.synchronized.append(index)


@pytest.fixture
def testdev():
    registry = default_registry()
    backend = TwoDeviceBackend()
    registry.add_backend(backend, "test-device-api")
    previous = device.default_place()
    try:
        yield backend
    finally:
        device.set_device(previous)
        registry.backends.pop("testdev")
        registry.owner.pop(("backend", "testdev"))
        registry.devices_of.pop("test-device-api")
        registry.changed()


@pytest.fixture(autouse=True)
def on_cpu():
    oarlock.set_device("cpu")
    yield
    oarlock.set_device("cpu")


# -- the cuda namespace ---------------------------------------------------------------------------------------

def test_cuda_namespace_is_an_attribute_and_an_importable_module():
    import oarlock.device.cuda as cuda
    from oarlock.device.cuda import memory_allocated
    assert oarlock.device.cuda is cuda and cuda.memory_allocated is memory_allocated
    paddle_names = {"Event", "Stream", "current_stream", "device_count", "empty_cache", "get_device_capability",
                    "get_device_name", "get_device_properties", "max_memory_allocated", "max_memory_reserved",
                    "memory_allocated", "memory_reserved", "reset_max_memory_allocated",
                    "reset_max_memory_reserved", "stream_guard", "synchronize"}
    assert paddle_names <= set(dir(cuda)) and paddle_names <= set(cuda.__all__)
    for name in ("Stream", "Event", "current_stream", "set_stream", "stream_guard", "synchronize", "empty_cache",
                 "memory_reserved", "max_memory_reserved", "reset_max_memory_reserved", "device_guard",
                 "get_available_device", "get_device_properties"):
        assert name in device.__all__ and hasattr(device, name), name


def _gpu_usable() -> bool:
    backend = default_registry().backends.get("gpu")
    return backend is not None and backend.device_count() > 0


@pytest.mark.skipif(_gpu_usable(), reason="a GPU is usable here: these check the API without one")
def test_cuda_namespace_without_a_gpu():
    cuda = oarlock.device.cuda
    assert cuda.device_count() == 0 and oarlock.device.device_count("gpu") == 0
    cuda.empty_cache()  # nothing cached: nothing to do
    oarlock.device.empty_cache()
    for call in (cuda.memory_allocated, cuda.max_memory_allocated, cuda.memory_reserved, cuda.synchronize,
                 cuda.current_stream, cuda.Stream, cuda.Event, cuda.get_device_name,
                 lambda: cuda.reset_max_memory_allocated(0), lambda: cuda.max_memory_reserved("cuda:0")):
        with pytest.raises(ValueError, match="device type 'gpu' .* is not available"):
            call()
    with pytest.raises(ValueError, match="device type 'gpu' .* is not available"):
        Stream("gpu")
    with pytest.raises(ValueError, match="device type 'gpu' .* is not available"):
        Event("gpu:0")
    with pytest.raises(ValueError, match="device type 'gpu' .* is not available"):
        oarlock.device.memory_allocated("gpu")


@pytest.mark.skipif(_gpu_usable(), reason="a GPU is usable here")
def test_an_unusable_gpu_says_why():
    backend = default_registry().backends.get("gpu")
    if backend is None:
        pytest.skip("oarlock-cuda is not installed")
    usable, reason = backend.available()
    assert not usable and reason
    for make in (lambda: oarlock.set_device("cuda:0"), lambda: oarlock.to_tensor([1.0], place="gpu"),
                 lambda: oarlock.zeros([2], device="gpu:1"), lambda: oarlock.to_tensor([1.0]).cuda(),
                 lambda: oarlock.to_tensor([1.0]).to("cuda")):
        with pytest.raises(ValueError) as info:
            make()
        message = str(info.value)
        assert "is not available: " + reason in message and "Usable device types: cpu" in message, message
    assert oarlock.get_device() == "cpu"


def test_cuda_functions_refuse_other_devices():
    with pytest.raises(ValueError, match="memory_allocated\\(\\): device: oarlock.device.cuda works on gpu devices"
                                         ".*got cpu.*oarlock.device.memory_allocated takes any device"):
        oarlock.device.cuda.memory_allocated("cpu")
    with pytest.raises(TypeError, match="device string"):
        oarlock.device.cuda.memory_allocated(1.5)


# -- streams and events on the cpu: trivially synchronous ----------------------------------------------------------

def test_cpu_streams_are_complete_and_follow_the_guard():
    default = current_stream()
    assert default.device is oarlock.CPUPlace() and default.query() and default == current_stream("cpu")
    s = Stream()
    assert s.device is oarlock.CPUPlace() and s.query() and s != default
    s.synchronize()
    with s:
        assert current_stream() == s
        inner = Stream("cpu", priority=1)
        with stream_guard(inner):
            assert current_stream() == inner
        assert current_stream() == s
        x = oarlock.ones([3]) * 2
    assert current_stream() == default
    np.testing.assert_array_equal(x.numpy(), [2, 2, 2])
    previous = set_stream(s)
    assert previous == default and current_stream() == s
    assert set_stream(previous) == s and current_stream() == default
    with stream_guard(None) as nothing:
        assert nothing is None and current_stream() == default
    assert s._as_parameter_.value is None  # the null handle: ctypes reads a 0 pointer as None
    oarlock.device.synchronize()
    oarlock.device.synchronize("cpu")


def test_the_current_stream_is_per_thread():
    s = Stream()
    seen = []
    with s:
        thread = threading.Thread(target=lambda: seen.append(current_stream()))
        thread.start()
        thread.join()
        assert current_stream() == s
    assert seen[0] == current_stream() and seen[0] != s


def test_cpu_events_record_time_and_are_complete():
    start, end = Event(enable_timing=True), Event("cpu", enable_timing=True)
    assert start.query()  # never recorded: nothing to wait for
    start.record()
    total = oarlock.ones([64, 64]) @ oarlock.ones([64, 64])
    s = Stream()
    end.record(s)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    assert float(total.sum()) == 64.0 ** 3
    marker = s.record_event()
    assert isinstance(marker, Event) and marker.query()
    other = Stream()
    other.wait_event(marker)
    other.wait_stream(s)
    with pytest.raises(ValueError, match="enable_timing=True"):
        marker.elapsed_time(end)
    with pytest.raises(ValueError, match="recorded first"):
        Event(enable_timing=True).elapsed_time(end)


def test_stream_and_event_argument_errors():
    with pytest.raises(ValueError, match="priority must be 1 \\(high\\) or 2 \\(low\\), got 0"):
        Stream(priority=0)
    with pytest.raises(TypeError, match="expected an Event, got Stream"):
        Stream().wait_event(Stream())
    with pytest.raises(TypeError, match="expected a Stream, got Event"):
        Stream().wait_stream(Event())
    with pytest.raises(TypeError, match="expected a Stream or None, got int"):
        Event().record(3)
    with pytest.raises(TypeError, match="expected a Stream"):
        set_stream("cpu")
    with pytest.raises(TypeError, match="expected a Stream or None"):
        stream_guard("cpu")
    with pytest.raises(ValueError, match="device type 'nodev'"):
        Stream("nodev:0")


def test_streams_of_two_devices(testdev):
    s0, s1 = Stream("testdev:0"), Stream("testdev:1")
    assert s0.device == "testdev:0" and s1.device == "testdev:1" and s0 != s1
    assert current_stream("testdev:1").device is s1.device
    event = Event("testdev:0")
    with pytest.raises(ValueError, match="the event belongs to testdev:0 but the stream to testdev:1"):
        event.record(s1)
    event.record(s0)
    s1.wait_event(event)
    Stream("cpu").wait_stream(s1)  # another device type: waits on the host
    with pytest.raises(ValueError, match="different device types"):
        Event("cpu", enable_timing=True).elapsed_time(Event("testdev:0", enable_timing=True))
    with s1:  # a stream of another device: the block runs with that device as the default
        assert oarlock.get_device() == "testdev:1" and testdev.current == 1
        assert oarlock.ones([2]).place == "testdev:1"
    assert oarlock.get_device() == "cpu"
    oarlock.device.synchronize("testdev:1")
    assert testdev.synchronized == [1]


# -- memory statistics and control --------------------------------------------------------------------------------

def test_cpu_memory_queries():
    x = oarlock.zeros([1 << 18])  # 1 MiB
    allocated, reserved = device.memory_allocated("cpu"), device.memory_reserved("cpu")
    assert allocated >= x.size * 4 and reserved >= x.size * 4
    assert device.max_memory_reserved() >= reserved - (1 << 20) and device.max_memory_allocated() >= x.size * 4
    device.reset_max_memory_reserved("cpu")
    device.reset_max_memory_allocated()
    device.empty_cache()
    assert device.memory_allocated() >= x.size * 4
    with pytest.raises(NotImplementedError, match="device type 'cpu' reports no device properties"):
        device.get_device_properties("cpu")


# -- custom devices and device strings -------------------------------------------------------------------------

def test_device_type_queries(testdev):
    assert "cpu" in device.get_all_device_type() and "testdev" in device.get_all_device_type()
    assert "testdev" in device.get_all_custom_device_type() and "cpu" not in device.get_all_custom_device_type()
    assert "gpu" not in device.get_all_custom_device_type()
    assert device.is_compiled_with_custom_device("testdev") and not device.is_compiled_with_custom_device("cpu")
    assert {"testdev:0", "testdev:1"} <= set(device.get_available_custom_device())
    assert {"testdev:0", "testdev:1"} <= set(device.get_available_device())
    assert "cpu" not in device.get_available_device()
    assert device.device_count("testdev") == 2 and device.device_count("nodev") == 0
    assert device.device_count() == device.device_count("gpu" if device.is_compiled_with_cuda() else "testdev")
    with pytest.raises(TypeError, match="device_type must be a str"):
        device.device_count(0)


def test_device_strings_wherever_a_device_is_accepted(testdev):
    place = oarlock.set_device("testdev:1")
    assert place is oarlock.CustomPlace("testdev", 1) and oarlock.get_device() == "testdev:1" and testdev.current == 1
    assert oarlock.ones([2]).place == "testdev:1"
    oarlock.set_device("cpu")
    t = oarlock.to_tensor([1.0, 2.0], place="testdev:1")
    assert t.place == "testdev:1" and t.place.is_custom_place() and t.place.get_device_type() == "testdev"
    assert oarlock.zeros([2], device="testdev:0").place == "testdev:0"
    assert oarlock.full([2], 3.0, device=oarlock.CustomPlace("testdev", 1)).place == "testdev:1"
    moved = t.to("testdev:0")
    assert moved.place == "testdev:0" and moved.tolist() == [1.0, 2.0]
    assert t.to(oarlock.CPUPlace()).place == "cpu" and t.cpu().place == "cpu"
    y = t * 2 + 1  # cpu kernels, through the parent
    assert y.place == "testdev:1" and y.tolist() == [3.0, 5.0]
    with device.device_guard("testdev:0"):
        assert oarlock.get_device() == "testdev:0" and oarlock.ones([1]).place == "testdev:0"
    assert oarlock.get_device() == "cpu"
    assert oarlock.CustomPlace("testdev", 1) == "testdev:1" and oarlock.CustomPlace("testdev", 1) != "testdev:5"


def test_device_errors(testdev):
    with pytest.raises(ValueError, match="device type 'nodev' \\(from 'nodev:0'\\) is not available; no installed "
                                         "plugin provides it. Available device types: .*cpu.*testdev"):
        oarlock.set_device("nodev:0")
    with pytest.raises(ValueError, match="to_tensor.*'testdev:2' asks for device index 2 but only 2 testdev"):
        oarlock.to_tensor([1.0], place="testdev:2")
    with pytest.raises(ValueError, match="zeros.*'cpu:1' asks for device index 1 but only 1 cpu"):
        oarlock.zeros([1], device="cpu:1")
    with pytest.raises(ValueError, match="Tensor.to\\(\\): device.*index 7"):
        oarlock.ones([1]).to("testdev:7")
    with pytest.raises(ValueError, match="malformed"):
        oarlock.set_device("testdev:x")
    a, b = oarlock.ones([2], device="testdev:0"), oarlock.ones([2], device="testdev:1")
    with pytest.raises(Exception, match="argument 'y' is on testdev:1 but an earlier input is on testdev:0; "
                                        "move it with .to\\('testdev:0'\\) first"):
        oarlock.add(a, b)
    with pytest.raises(Exception, match="is on cpu but an earlier input is on testdev:0"):
        a + oarlock.ones([2])
    with pytest.raises(Exception, match="different devices"):
        oarlock.concat([a, b])
    assert oarlock.get_device() == "cpu"


def test_pin_memory_without_a_gpu_says_why():
    import oarlock
    gpu = oarlock.registry.default_registry().backends.get("gpu")
    if gpu is not None and gpu.available()[0]:
        pinned = oarlock.ones([3]).pin_memory()
        assert pinned.place == "cpu" and pinned.tolist() == [1.0, 1.0, 1.0]
        return
    with pytest.raises(RuntimeError, match="Tensor.pin_memory\\(\\): pinned memory needs a usable GPU"):
        oarlock.ones([3]).pin_memory()


def test_kernels_run_through_the_backends_bind_kernel_on_both_paths():
    """A backend with a current device (CuPy) wraps each kernel to run on the tensor's device; the
    dispatcher must use that wrapper on the slow path and keep it in the fast path's cache."""
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent('''
        import numpy as np
        import oarlock
        from oarlock import hookimpl
        from oarlock.device import Backend
        from oarlock.plugins import register_plugin

        calls = []

        class Scoped(Backend):
            type, parent, xp, array_types = "scoped", "cpu", np, (np.ndarray,)
            def device_count(self): return 2
            def asarray(self, data, dtype=None, index=0): return np.asarray(data, dtype=dtype)
            def to_host(self, a): return np.asarray(a)
            def bind_kernel(self, kernel, index):
                def bound(xp, *args, **kwargs):
                    calls.append(index)
                    return kernel(xp, *args, **kwargs)
                return bound

        class Plugin:
            @hookimpl
            def oarlock_register_backends(self, backends): backends.register(Scoped())

        register_plugin(Plugin(), "scoped")
        a = oarlock.to_tensor([1.0, 2.0], place="scoped:1")
        for _ in range(3):
            b = a + a          # first call: slow path (seeds the cache), then the fast path
        print(b.place, b.tolist(), calls[-3:])
    ''')], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "scoped:1 [2.0, 4.0] [1, 1, 1]"


def test_oarlock_plugins_says_why_a_device_is_unavailable():
    import oarlock
    gpu = oarlock.registry.default_registry().backends.get("gpu")
    if gpu is None or gpu.available()[0]:
        pytest.skip("needs the gpu plugin installed without a usable GPU")
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "oarlock.cli", "plugins"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"devices: gpu (unavailable: {gpu.available()[1]})" in done.stdout
