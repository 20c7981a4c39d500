"""The communication-backend hook: the registry table, the choice of backend from a tensor's
device (derived devices inherit their parent's backend), a third-party backend registered
by a plugin, and the import boundaries (plugins load no MPI and no CuPy until used)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from oarlock.registry import DuplicateRegistration, Registry
from oarlock.device import Backend

pytest.importorskip("mpi4py")


class _Device(Backend):
    def __init__(self, name, parent):
        self.type, self.parent = name, parent


class _Comm:
    def __init__(self, name, device_types):
        self.name, self.device_types = name, device_types


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_registry_finds_backends_through_the_parent_chain():
    registry = Registry()
    registry.add_backend(_Device("cpu", None), "cpu")
    registry.add_backend(_Device("gpu", None), "cuda")
    registry.add_backend(_Device("metax_gpu", "gpu"), "metax")
    mpi, nccl = _Comm("mpi", ("cpu",)), _Comm("nccl", ("gpu",))
    registry.add_comm(mpi, "xccl")
    registry.add_comm(nccl, "xccl")
    assert registry.comms_for_device("cpu") == [mpi]
    assert registry.comms_for_device("metax_gpu") == [nccl]
    vendor = _Comm("mccl", ("metax_gpu",))
    registry.add_comm(vendor, "metax")
    assert registry.comms_for_device("metax_gpu") == [vendor]   # the device's own library comes first
    assert registry.comms_for_device("npu") == []
    with pytest.raises(DuplicateRegistration, match="'xccl'.*'other'"):
        registry.add_comm(_Comm("mpi", ("cpu",)), "other")
    with pytest.raises(ValueError, match="without a name or device_types"):
        registry.add_comm(_Comm("", ("cpu",)), "other")


def test_plugins_load_without_importing_mpi_or_cupy():
    result = _run('''
        import sys
        import oarlock, oarlock.distributed as dist
        oarlock.ones([2])
        print(dist.get_rank(), dist.get_world_size(), dist.is_initialized())
        print("mpi4py" in sys.modules, "cupy" in sys.modules)
        dist.init_parallel_env()
        print("mpi4py" in sys.modules, "cupy" in sys.modules, dist.is_initialized())
    ''')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["0 1 False", "False False", "True False True"]


def test_oarlock_plugins_lists_the_comm_backends():
    result = subprocess.run([sys.executable, "-W", "ignore", "-m", "oarlock.cli", "plugins"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "comms:" in line)
    assert "mpi (cpu)" in line and "nccl (gpu" in line


def test_third_party_backend_serves_its_device_and_derived_devices_fall_back():
    """A plugin adds a device derived from the CPU and a one-rank library for it: tensors of
    that device go through that library; without it they would use "mpi" through the parent."""
    result = _run('''
        import numpy as np
        import oarlock, oarlock.distributed as dist
        from oarlock import hookimpl
        from oarlock.device import Backend
        from oarlock.plugins import register_plugin
        from oarlock_xccl import DONE, CommBackend

        class Accel(Backend):
            type, parent, xp, array_types = "accel", "cpu", np, (np.ndarray,)
            def device_count(self): return 1
            def asarray(self, data, dtype=None, index=0): return np.asarray(data, dtype=dtype)
            def to_host(self, a): return np.asarray(a)

        class Solo(CommBackend):
            """A library for worlds of one rank: every collective is a copy."""
            name, device_types, unique_id_size = "solo", ("accel",), 4
            calls = []
            def get_unique_id(self): return b"solo"
            def comm_init_rank(self, nranks, unique_id, rank): return (nranks, rank)
            def all_reduce(self, send, recv, count, dtype, op, comm, stream=None):
                self.calls.append("all_reduce"); recv[...] = send; return DONE

        class Plugin:
            @hookimpl
            def oarlock_register_backends(self, backends): backends.register(Accel())

        class CommPlugin:
            @hookimpl
            def oarlock_register_comm_backends(self, comms): comms.register(Solo())

        register_plugin(Plugin(), "accel")
        dist.init_parallel_env()
        x = oarlock.to_tensor([1.0, 2.0], place="accel")
        dist.all_reduce(x)                 # no library for "accel": the parent's ("mpi")
        print(x.place, x.tolist(), Solo.calls)
        register_plugin(CommPlugin(), "solo")
        dist.all_reduce(x)
        print(x.place, x.tolist(), Solo.calls)
    ''')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["accel:0 [1.0, 2.0] []", "accel:0 [1.0, 2.0] ['all_reduce']"]
