"""register_cuda_like_device and Registry.kernel_reuse, in isolated plugin managers (no global state):
overrides win, everything else falls back through the parent; the backend takes the runtime's members
first, then the parent's; a device registered before its parent resolves it on first use; bad input
gives errors naming the function, the argument and the value. The real "gpu" backend plays no part: a
fake parent stands in for it. (tests/test_vendor_example.py runs a derived device end to end.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from oarlock import hookimpl
from oarlock.cli import describe_reuse
from oarlock.device import Backend
from oarlock.dtypes import float16, float32
from oarlock.plugins import PluginLoadWarning, PluginManager, device_reuse
from oarlock_cuda import CudaLikeDevice, register_cuda_like_device
from oarlock_cuda.derived import DerivedBackend

FN = "register_cuda_like_device()"


def _isolated():
    return PluginManager(group="oarlock.no-such-group", environ={}).load()


class FakeGPU(Backend):
    """Stands in for the CuPy backend: four devices, numpy arrays, a DLPack type, an extra member."""

    type, parent, xp, array_types = "gpu", None, np, (np.ndarray,)
    dlpack_device_type = 2

    def __init__(self):
        self.calls, self.seeded = [], None

    def device_count(self):
        return 4

    def asarray(self, data, dtype=None, index=0):
        self.calls.append(("asarray", index))
        return np.asarray(data, dtype=dtype)

    def to_host(self, array):
        return np.asarray(array)

    def seed(self, seed):
        self.seeded = seed

    def memory_allocated(self, index=0):
        return 111

    def stream(self, index=0, priority=2):  # overrides the interface's default
        return f"gpu-stream-{index}"

    def graph_pool(self, index=0):  # outside the interface
        return f"gpu-pool-{index}"


class GPUPlugin:
    def __init__(self):
        self.backend = FakeGPU()

    @hookimpl
    def oarlock_register_backends(self, backends):
        backends.register(self.backend)


def _kernel(tag):
    def kernel(xp, x):
        return tag
    kernel.__name__ = tag
    return kernel


GENERIC = {name: _kernel(f"generic-{name}") for name in ("scale", "shift", "relu", "softmax")}
GPU_SHIFT, GPU_ONLY, CPU_ONLY = _kernel("gpu-shift"), _kernel("gpu-only"), _kernel("cpu-only")
MY_RELU, MY_SOFTMAX, MY_SCALE16 = _kernel("metax-relu"), _kernel("metax-softmax"), _kernel("metax-scale16")


class OpsPlugin:
    """Four ops with generic kernels (shift also has a gpu one), one gpu-only and one cpu-only op."""

    @hookimpl
    def oarlock_register_ops(self, ops):
        for name, kernel in GENERIC.items():
            ops.define(f"{name}(x: Tensor) -> Tensor")
            ops.kernel(name)(kernel)
        ops.kernel("shift", device="gpu")(GPU_SHIFT)
        ops.define("gpu_only(x: Tensor) -> Tensor")
        ops.kernel("gpu_only", device="gpu")(GPU_ONLY)
        ops.define("cpu_only(x: Tensor) -> Tensor")
        ops.kernel("cpu_only", device="cpu")(CPU_ONLY)


def _metax(**options):
    options.setdefault("overrides", {"relu": MY_RELU, "softmax": MY_SOFTMAX, ("scale", "float16"): MY_SCALE16})
    return register_cuda_like_device("metax_gpu", **options)


def _manager_with(*plugins):
    manager = _isolated()
    for name, plugin in plugins:
        manager.register(plugin, name)
    return manager


# -- kernels ------------------------------------------------------------------------------------------------

def test_overrides_win_and_everything_else_falls_back_through_the_parent():
    manager = _manager_with(("cuda", GPUPlugin()), ("ops", OpsPlugin()), ("metax", _metax()))
    registry = manager.registry
    assert not manager.failures
    find = registry.find_kernel
    assert find("relu", "metax_gpu", float32) is MY_RELU and find("softmax", "metax_gpu", float16) is MY_SOFTMAX
    assert find("scale", "metax_gpu", float16) is MY_SCALE16  # a (name, dtype) override: that dtype only
    assert find("scale", "metax_gpu", float32) is GENERIC["scale"]
    assert find("shift", "metax_gpu", float32) is GPU_SHIFT  # the parent's kernel before the generic one
    assert find("gpu_only", "metax_gpu", float32) is GPU_ONLY
    assert find("cpu_only", "metax_gpu", float32) is None  # cpu is not on metax_gpu's chain
    assert find("relu", "gpu", float32) is GENERIC["relu"]  # the parent is untouched
    assert registry.kernel_count["metax"] == 3 and registry.devices_of["metax"] == ["metax_gpu"]

    # overridden: relu, softmax, scale (float16 only still counts); reused: shift, gpu_only; cpu_only: neither
    assert registry.kernel_reuse("metax_gpu") == (2, 3, 5)
    assert registry.kernel_reuse("gpu") == (3, 2, 5)

    rows = {row.name: row for row in manager.info()}
    (entry,) = rows["metax"].reuse
    assert entry == {"device": "metax_gpu", "parent": "gpu", "reused": 2, "overridden": 3, "total": 5,
                     "problems": []}
    assert describe_reuse(entry) == "metax_gpu: 2 of 5 kernels reused from gpu (40.0%), 3 overridden"
    assert rows["cuda"].reuse == [] and rows["ops"].reuse == []


def test_kernel_reuse_of_a_device_chain_and_of_an_unknown_device():
    manager = _manager_with(("cuda", GPUPlugin()), ("ops", OpsPlugin()), ("metax", _metax()),
                            ("metax2", register_cuda_like_device("metax_next", parent="metax_gpu",
                                                                 overrides={"shift": _kernel("next-shift")})))
    registry = manager.registry
    assert registry.find_kernel("relu", "metax_next", float32) is MY_RELU  # the grandparent's override
    assert registry.find_kernel("gpu_only", "metax_next", float32) is GPU_ONLY
    assert registry.kernel_reuse("metax_next") == (4, 1, 5)
    with pytest.raises(ValueError, match=r"kernel_reuse\(\): device_type 'nope' is not a registered device "
                                         r"type; registered: gpu, metax_gpu, metax_next"):
        registry.kernel_reuse("nope")
    assert describe_reuse({"device": "d", "parent": "gpu", "reused": 0, "overridden": 0, "total": 0}) == \
        "d: 0 of 0 kernels reused from gpu (n/a), 0 overridden"


def test_the_device_registers_from_a_vendor_plugins_own_hooks():
    device = _metax(runtime={"device_count": 2})

    class Vendor:
        @hookimpl
        def oarlock_register_backends(self, backends):
            device.register_backend(backends)

        @hookimpl
        def oarlock_register_ops(self, ops):
            device.register_kernels(ops)

    manager = _manager_with(("cuda", GPUPlugin()), ("ops", OpsPlugin()), ("metax", Vendor()))
    assert isinstance(device, CudaLikeDevice) and isinstance(device.backend, DerivedBackend)
    assert manager.registry.backends["metax_gpu"] is device.backend
    assert manager.registry.find_kernel("relu", "metax_gpu", float32) is MY_RELU
    assert manager.registry.kernel_reuse("metax_gpu") == (2, 3, 5)
    assert manager.registry.parse_place("metax_gpu:1").backend is device.backend


# -- the backend ------------------------------------------------------------------------------------------

class Runtime:
    def __init__(self):
        self.synced, self.current = [], 0

    def device_count(self):
        return 2

    def synchronize(self, index=0):
        self.synced.append(index)

    def memory_allocated(self, index=0):
        return 1000 + index

    vendor_name = "MetaX C500"

    def set_current_device(self, index):
        self.current = index


def test_backend_takes_the_runtime_first_then_the_parent_backend():
    gpu, runtime = GPUPlugin(), Runtime()
    manager = _manager_with(("cuda", gpu), ("ops", OpsPlugin()), ("metax", _metax(runtime=runtime)))
    backend = manager.registry.backends["metax_gpu"]
    assert (backend.type, backend.parent) == ("metax_gpu", "gpu")
    assert backend.device_count() == 2  # the runtime's, not the parent's 4
    backend.synchronize(1)
    assert runtime.synced == [1]
    assert backend.memory_allocated(1) == 1001
    assert backend.max_memory_allocated(1) == 0  # the parent's (Backend's default)
    backend.set_current_device(1)
    assert runtime.current == 1
    assert backend.vendor_name == "MetaX C500"  # outside the Backend interface: the runtime's ...
    assert backend.graph_pool(3) == "gpu-pool-3"  # ... else the parent's
    assert backend.stream(3) == "gpu-stream-3"  # an interface member the parent implements
    # an interface default the parent keeps runs for the derived device: memory_reserved defaults to
    # memory_allocated, here the runtime's
    assert backend.memory_reserved(1) == 1001
    array = backend.asarray([1.0, 2.0], "float32", 1)
    assert gpu.backend.calls == [("asarray", 1)] and array.dtype == np.float32
    assert backend.xp is np and backend.array_types == (np.ndarray,)
    assert backend.dlpack_device_type is None  # the parent's arrays stay the parent's in from_dlpack
    backend.seed(5)
    assert gpu.backend.seeded == 5  # the parent's generators are shared
    place = manager.registry.parse_place("metax_gpu:1")
    assert place.backend is backend and place.is_custom_place()
    with pytest.raises(ValueError, match="only 2 metax_gpu"):
        manager.registry.parse_place("metax_gpu:2")
    with pytest.raises(AttributeError):
        _ = backend.no_such_member


def test_a_dict_runtime_supplies_constants_and_functions():
    gpu = GPUPlugin()
    runtime = {"device_count": 3, "synchronize": None, "max_memory_allocated": lambda index=0: 7 * index,
               "dlpack_device_type": 2}
    manager = _manager_with(("cuda", gpu), ("metax", _metax(runtime=runtime, overrides=None)))
    backend = manager.registry.backends["metax_gpu"]
    assert backend.device_count() == 3 and backend.synchronize(0) is None
    assert backend.max_memory_allocated(2) == 14 and backend.memory_allocated() == 111
    assert backend.dlpack_device_type == 2


def test_registered_before_its_parent_it_resolves_the_parent_on_first_use():
    """Entry points load by name, so a vendor plugin ("acme") may run its hooks before "cpu" or "cuda"."""
    manager = _isolated()
    manager.register(_metax(runtime={"device_count": 2}), "acme")
    assert not manager.failures
    backend = manager.registry.backends["metax_gpu"]
    with pytest.raises(ValueError) as info:
        backend.asarray([1.0])
    message = str(info.value)
    assert FN in message and "parent='gpu'" in message and "'metax_gpu'" in message
    assert "registered: metax_gpu" in message and "pip install oarlock-cuda" in message
    (entry,) = {row.name: row for row in manager.info()}["acme"].reuse
    assert entry["problems"][0] == "its parent device type 'gpu' is not registered by any installed plugin"

    gpu = GPUPlugin()
    manager.register(gpu, "cuda")
    manager.register(OpsPlugin(), "ops")
    backend.asarray([1.0], None, 1)
    assert gpu.backend.calls == [("asarray", 1)]
    assert manager.registry.find_kernel("relu", "metax_gpu", float32) is MY_RELU  # registered before the op
    assert device_reuse(manager.registry, "metax_gpu")["problems"] == []


def test_a_derived_device_can_derive_from_cpu():
    class CPU(FakeGPU):
        type = "cpu"

    class CPUPlugin:
        @hookimpl
        def oarlock_register_backends(self, backends):
            backends.register(CPU())

    manager = _manager_with(("cpu", CPUPlugin()), ("ops", OpsPlugin()),
                            ("acme", register_cuda_like_device("acme_npu", parent="cpu",
                                                               overrides={"relu": MY_RELU})))
    assert manager.registry.find_kernel("cpu_only", "acme_npu", float32) is CPU_ONLY
    assert manager.registry.find_kernel("shift", "acme_npu", float32) is GENERIC["shift"]  # gpu's is not on it
    assert manager.registry.kernel_reuse("acme_npu") == (4, 1, 5)
    assert manager.registry.backends["acme_npu"].device_count() == 4  # no runtime: all the parent's


# -- errors ----------------------------------------------------------------------------------------------

def test_unknown_parent_is_named_on_first_use():
    manager = _manager_with(("cuda", GPUPlugin()), ("ops", OpsPlugin()),
                            ("metax", register_cuda_like_device("metax_gpu", parent="nope_gpu")))
    with pytest.raises(ValueError, match=r"register_cuda_like_device\(\): parent='nope_gpu' of device "
                                         r"'metax_gpu' is not a registered device type; registered: gpu, "
                                         r"metax_gpu\. Install the plugin that provides 'nope_gpu', or derive "
                                         r"from 'cpu'"):
        manager.registry.backends["metax_gpu"].to_host(np.zeros(1))
    with pytest.raises(ValueError, match="parent='nope_gpu'"):
        _ = manager.registry.backends["metax_gpu"].xp


def test_name_clash_with_an_existing_device_names_the_owner():
    manager = _manager_with(("cuda", GPUPlugin()), ("ops", OpsPlugin()), ("metax", _metax()))
    with pytest.warns(PluginLoadWarning, match="skipped"):
        manager.register(_metax(), "metax_again")
    assert (f"{FN}: name='metax_gpu' is already a device type, registered by plugin 'metax'"
            in manager.failures["metax_again"])
    assert manager.registry.kernel_count["metax_again"] == 0  # no kernel of the clashing plugin got in
    for taken in ("cpu", "gpu", "cuda"):  # the built-in types are refused at once
        with pytest.raises(ValueError, match=rf"register_cuda_like_device\(\): name='{taken}' is a built-in"):
            register_cuda_like_device(taken)


def test_override_of_an_unknown_op_is_named_with_a_suggestion():
    device = register_cuda_like_device("metax_gpu", overrides={"scael": MY_RELU, "relu": MY_RELU})
    manager = _manager_with(("cuda", GPUPlugin()), ("ops", OpsPlugin()), ("metax", device))
    expected = (f"{FN}: overrides for device 'metax_gpu' name op(s) that no installed plugin defines: "
                f"'scael' (did you mean 'scale'?)")
    with pytest.raises(ValueError) as info:
        manager.registry.backends["metax_gpu"].asarray([1.0])
    assert str(info.value) == expected
    with pytest.raises(ValueError, match="did you mean 'scale'"):
        device.check(manager.registry)
    assert device_reuse(manager.registry, "metax_gpu")["problems"] == [
        "it has kernels for ops no installed plugin defines: scael"]


def test_a_parent_chain_cycle_is_refused():
    manager = _isolated()
    manager.register(register_cuda_like_device("chip_a", parent="chip_b"), "a")
    with pytest.warns(PluginLoadWarning):
        manager.register(register_cuda_like_device("chip_b", parent="chip_a"), "b")
    assert "parent='chip_a' derives from 'chip_b' itself" in manager.failures["b"]


@pytest.mark.parametrize("kwargs, error, pattern", [
    ({"name": 3}, TypeError, "name must be a device type name (str), got int 3"),
    ({"name": "Metax"}, ValueError, "name='Metax' is not a valid device type name"),
    ({"name": "metax:0"}, ValueError, "name='metax:0' is not a valid device type name"),
    ({"name": "metax", "parent": "gpu:0"}, ValueError, "parent='gpu:0' is not a device type name"),
    ({"name": "metax", "parent": None}, TypeError, "parent must be a device type name such as 'gpu' or 'cpu', "
                                                   "got NoneType None"),
    ({"name": "metax", "parent": "metax"}, ValueError, "parent='metax' is the new device itself"),
    ({"name": "metax", "runtime": 2}, TypeError, "runtime must be an object or a dict"),
    ({"name": "metax", "runtime": {1: len}}, TypeError, "runtime keys must be member names (str), got 1"),
    ({"name": "metax", "overrides": ["relu"]}, TypeError, "overrides must be a dict"),
    ({"name": "metax", "overrides": {"relu": 3}}, TypeError, "overrides['relu'] must be a kernel function"),
    ({"name": "metax", "overrides": {3: len}}, TypeError, "overrides keys must be op names or (op_name, dtype) "
                                                          "pairs, got 3"),
    ({"name": "metax", "overrides": {("relu", "float99"): len}}, ValueError,
     "overrides key ('relu', 'float99') has an unknown dtype"),
    ({"name": "metax", "overrides": {("relu", "float32"): len, ("relu", float32): len}}, ValueError,
     "overrides gives op 'relu' (dtype float32) twice"),
    ({"name": "metax", "plugin": 3}, TypeError, "plugin must be a plugin name (a non-empty str) or None, got int 3"),
])
def test_malformed_arguments_are_refused_at_once(kwargs, error, pattern):
    with pytest.raises(error) as info:
        register_cuda_like_device(**kwargs)
    assert str(info.value).startswith(FN + ": ") and pattern in str(info.value), str(info.value)


def test_cuda_is_accepted_as_parent_and_means_gpu():
    assert register_cuda_like_device("metax_gpu", parent="cuda").parent == "gpu"


# -- plugin="name": the process-wide manager, in a subprocess ------------------------------------------------

def test_plugin_argument_registers_in_the_process_wide_manager_at_once():
    code = textwrap.dedent('''
        import oarlock
        from oarlock_cuda import register_cuda_like_device
        calls = []
        def relu(xp, x):
            calls.append(x.shape)
            return xp.maximum(x, 0)
        try:
            register_cuda_like_device("acme_npu", parent="cpu", overrides={"rleu": relu}, plugin="acme")
        except ValueError as exc:
            print("error:", exc)
        print("acme_npu" in oarlock.device.get_all_custom_device_type())
        register_cuda_like_device("acme_npu", runtime={"device_count": 2}, parent="cpu",
                                  overrides={"relu": relu}, plugin="acme")
        x = oarlock.to_tensor([-1.0, 2.0], place="acme_npu:1", stop_gradient=False)
        y = oarlock.nn.functional.relu(x).sum()
        y.backward()
        print(y.place, x.grad.place, x.grad.tolist(), calls)
        try:
            register_cuda_like_device("acme_npu", parent="cpu", plugin="acme2")
        except ValueError as exc:
            print("error:", exc)
    ''')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, OARLOCK_DISABLE_PLUGINS="cuda"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"error: {FN}: overrides for device 'acme_npu' name op(s) that no installed "
                               f"plugin defines: 'rleu' (did you mean 'relu'?)")
    assert lines[1] == "False"  # refused before anything was registered
    assert lines[2] == "acme_npu:1 acme_npu:1 [0.0, 1.0] [(2,)]"
    assert lines[3].startswith(f"error: {FN}: name='acme_npu' is already a device type, registered by plugin 'acme'")
