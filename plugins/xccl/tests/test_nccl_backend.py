"""The "nccl" backend where CI runs it: without a GPU, and usually without CuPy.

What can be checked there: registering the backend imports no CuPy, `available()`
says what is missing, the dtype/op tables cover every oarlock dtype, unique ids
convert, arguments are checked before any library is needed. Where CuPy is
installed, the tables are checked against `cupy.cuda.nccl`'s real constants.
Collectives on a GPU are checked by bench/nccl_check.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from oarlock.dtypes import all_dtypes, convert_dtype
from oarlock_xccl.backend import CommBackend, ReduceOp
from oarlock_xccl.nccl import (BYTES, COMPLEX_PARTS, REDUCE_OPS, REDUCE_TYPES, UNIQUE_ID_SIZE, NCCLBackend, NCCLComm,
                               id_to_bytes, id_to_tuple, movement_bytes, reduce_plan)

REDUCING = ("all_reduce", "reduce", "reduce_scatter")
CUPY_INSTALLED = importlib.util.find_spec("cupy") is not None


def _cupy_nccl():
    """cupy.cuda.nccl if CuPy and its NCCL library load here, else skip saying which is missing."""
    if not CUPY_INSTALLED:
        pytest.skip("cupy is not installed here (pip install 'oarlock-xccl[cuda12]' to run this check)")
    from cupy.cuda import nccl
    if not nccl.available:
        pytest.skip("cupy is installed but its NCCL library is not (pip install nvidia-nccl-cu12)")
    return nccl


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


# A meta-path finder that records every attempt to import cupy, installed or not.
_SPY = '''
    import json, sys

    class CupySpy:
        attempts = []

        def find_spec(self, name, path=None, target=None):
            if name == "cupy" or name.startswith("cupy."):
                self.attempts.append(name)
            return None

    spy = CupySpy()
    sys.meta_path.insert(0, spy)
'''


def test_import_and_construction_import_no_cupy():
    result = _run(_SPY + '''
    from oarlock_xccl.nccl import NCCLBackend
    backend = NCCLBackend()
    print(json.dumps([spy.attempts, backend.name, list(backend.device_types)]))
    ''')
    assert result.returncode == 0, result.stderr
    attempts, name, device_types = json.loads(result.stdout)
    assert attempts == [] and name == "nccl" and device_types == ["gpu"]


def test_plugin_load_registers_nccl_for_gpu_without_importing_cupy():
    result = _run(_SPY + '''
    from oarlock.plugins import default_manager
    manager = default_manager().load()
    backend = manager.registry.comms.get("nccl")
    print(json.dumps([spy.attempts, manager.failures, backend and list(backend.device_types),
                      backend and backend.plugin, [c.name for c in manager.registry.comms_for_device("gpu")]]))
    ''')
    assert result.returncode == 0, result.stderr
    attempts, failures, device_types, plugin, gpu_backends = json.loads(result.stdout)
    assert attempts == []
    assert (device_types, plugin, gpu_backends) == (["gpu"], "xccl", ["nccl"]), failures


def test_interface_attributes():
    backend = NCCLBackend()
    assert isinstance(backend, CommBackend)
    assert backend.unique_id_size == UNIQUE_ID_SIZE == 128
    assert backend.has_all_to_all is False
    with pytest.raises(NotImplementedError, match="group_start"):
        backend.all_to_all(None, [], None, [], convert_dtype("float32"), None)


def _gpu_count() -> int:
    import cupy
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:       # no driver: the same as no GPU for this check
        return 0


def test_available_says_what_is_missing_and_is_cached():
    backend = NCCLBackend()
    usable, reason = backend.available()
    assert backend.available() is backend.available()
    if not CUPY_INSTALLED:
        assert not usable
        assert "cupy is not installed" in reason and "pip install 'oarlock-xccl[cuda12]'" in reason
        return
    from cupy.cuda import nccl
    if not nccl.available:
        assert not usable and "NCCL library" in reason and "nvidia-nccl-cu12" in reason
    elif _gpu_count() == 0:
        assert not usable and "GPU" in reason and "getDeviceCount" in reason
    else:
        assert (usable, reason) == (True, "")


def test_operations_without_the_library_raise_the_reason():
    backend = NCCLBackend()
    usable, reason = backend.available()
    if usable:
        pytest.skip("the NCCL backend is usable here: bench/nccl_check.py checks it")
    with pytest.raises(RuntimeError, match="get_unique_id") as caught:
        backend.get_unique_id()
    assert reason in str(caught.value)
    with pytest.raises(RuntimeError, match="comm_init_rank"):
        backend.comm_init_rank(1, bytes(UNIQUE_ID_SIZE), 0)
    with pytest.raises(RuntimeError, match="group_start"):
        backend.group_start()


@pytest.mark.parametrize("nranks, unique_id, rank, argument", [
    (0, bytes(128), 0, "nranks"),
    (True, bytes(128), 0, "nranks"),
    (2, bytes(128), 2, "rank"),
    (2, bytes(128), -1, "rank"),
    (2, bytes(127), 0, "unique_id"),
    (2, tuple(range(128)), 0, "unique_id"),
])
def test_comm_init_rank_checks_its_arguments_first(nranks, unique_id, rank, argument):
    with pytest.raises(ValueError, match=rf"comm_init_rank\(\): {argument} must"):
        NCCLBackend().comm_init_rank(nranks, unique_id, rank)


def test_group_end_without_group_start():
    with pytest.raises(RuntimeError, match=r"group_end\(\): called without a matching group_start"):
        NCCLBackend().group_end()


def test_host_arrays_and_bad_ranks_are_named():
    backend = NCCLBackend()
    comm = NCCLComm(None, 2, 0, None)
    f32 = convert_dtype("float32")
    with pytest.raises(TypeError, match=r"NCCLBackend\.send\(\): send must be a GPU array .* numpy\.ndarray"):
        backend.send(np.zeros(4, np.float32), 4, f32, 1, comm)
    with pytest.raises(ValueError, match=r"NCCLBackend\.broadcast\(\): root must be an int rank in \[0, 2\), got 2"):
        backend.broadcast(None, None, 4, f32, 2, comm)
    with pytest.raises(ValueError, match=r"NCCLBackend\.recv\(\): peer must be .* got 'x'"):
        backend.recv(None, 4, f32, "x", comm)


# -- the dtype and op tables ---------------------------------------------------------------------------
@pytest.mark.parametrize("collective", REDUCING)
@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", all_dtypes, ids=lambda d: d.name)
def test_every_dtype_and_op_reduces_or_is_refused_by_name(dtype, op, collective):
    try:
        plan = reduce_plan(collective, dtype, op)
    except ValueError as exc:
        message = str(exc)
        assert f"NCCLBackend.{collective}()" in message and f"dtype {dtype.name}" in message
        assert f"op {op.name}" in message and "accepted:" in message
        return
    # NCCL reads the oarlock buffer exactly: `factor` NCCL elements cover one oarlock element
    assert plan.type.size * plan.factor == dtype.itemsize
    assert plan.op in REDUCE_OPS
    # floats (and complex parts) reduce in a float type, integers and bool in an integer one
    assert ("FLOAT" in plan.type.constant) == (dtype.is_floating_point or dtype.is_complex)


@pytest.mark.parametrize("name, op, constant, nccl_op", [
    ("bool", ReduceOp.SUM, "NCCL_UINT8", ReduceOp.MAX),
    ("bool", ReduceOp.MAX, "NCCL_UINT8", ReduceOp.MAX),
    ("bool", ReduceOp.PROD, "NCCL_UINT8", ReduceOp.MIN),
    ("bool", ReduceOp.MIN, "NCCL_UINT8", ReduceOp.MIN),
    ("complex64", ReduceOp.SUM, "NCCL_FLOAT32", ReduceOp.SUM),
    ("complex128", ReduceOp.AVG, "NCCL_FLOAT64", ReduceOp.AVG),
    ("bfloat16", ReduceOp.PROD, "NCCL_BFLOAT16", ReduceOp.PROD),
    ("float32", ReduceOp.AVG, "NCCL_FLOAT32", ReduceOp.AVG),
    ("int64", ReduceOp.MIN, "NCCL_INT64", ReduceOp.MIN),
])
def test_reduction_rules(name, op, constant, nccl_op):
    plan = reduce_plan("all_reduce", convert_dtype(name), op)
    assert (plan.type.constant, plan.op) == (constant, nccl_op)
    assert plan.factor == (2 if name in COMPLEX_PARTS else 1)


@pytest.mark.parametrize("name, op", [("bool", ReduceOp.AVG), ("complex64", ReduceOp.MAX),
                                      ("complex128", ReduceOp.PROD), ("int16", ReduceOp.SUM)])
def test_refused_reductions(name, op):
    with pytest.raises(ValueError, match=rf"reduce_scatter\(\): NCCL cannot reduce dtype {name} with op {op.name}"):
        reduce_plan("reduce_scatter", convert_dtype(name), op)


def test_op_outside_reduce_op_is_named():
    with pytest.raises(ValueError, match=r"all_reduce\(\): op must be a ReduceOp .* got 9"):
        reduce_plan("all_reduce", convert_dtype("float32"), 9)


@pytest.mark.parametrize("dtype", all_dtypes, ids=lambda d: d.name)
def test_every_dtype_moves_as_bytes(dtype):
    assert BYTES.size == 1
    assert movement_bytes(7, dtype) == 7 * np.dtype(dtype.np).itemsize


def test_every_numeric_nccl_type_is_reachable():
    """Each entry of the type table is what some oarlock dtype reduces in (no dead entries)."""
    reached = set()
    for dtype in all_dtypes:
        try:
            reached.add(reduce_plan("all_reduce", dtype, ReduceOp.SUM).type)
        except ValueError:
            pass
    assert reached == set(REDUCE_TYPES.values())


# -- unique ids ---------------------------------------------------------------------------------------
def test_unique_id_converts_between_bytes_and_signed_chars():
    data = bytes(range(128))[::-1]
    as_tuple = id_to_tuple(data)
    assert len(as_tuple) == 128 and min(as_tuple) >= -128 and max(as_tuple) <= 127
    assert as_tuple[0] == 127 and id_to_tuple(b"\xff" * 128)[0] == -1
    assert id_to_bytes(as_tuple) == id_to_bytes(data) == data
    with pytest.raises(ValueError, match=r"get_unique_id\(\): a unique id has 128 bytes, got 3"):
        id_to_bytes(b"abc")


# -- against CuPy, where it is installed ----------------------------------------------------------------
def test_tables_match_cupy_constants():
    nccl = _cupy_nccl()
    for entry in [*REDUCE_TYPES.values(), *REDUCE_OPS.values()]:
        if hasattr(nccl, entry.constant):
            assert getattr(nccl, entry.constant) == entry.value, entry.constant
        else:
            # CuPy may predate a type (float8), never the ones every NCCL 2 has
            assert entry.since > 0, f"cupy.cuda.nccl lacks {entry.constant}"


def test_resolved_constants_with_the_installed_nccl():
    nccl = _cupy_nccl()
    backend, version = NCCLBackend(), nccl.get_version()
    f32, bf16, c64, b = (convert_dtype(n) for n in ("float32", "bfloat16", "complex64", "bool"))
    assert backend._reduction("all_reduce", f32, ReduceOp.SUM) == (nccl.NCCL_FLOAT32, 1, nccl.NCCL_SUM, False)
    assert backend._reduction("reduce", b, ReduceOp.PROD) == (nccl.NCCL_UINT8, 1, nccl.NCCL_MIN, False)
    assert backend._reduction("all_reduce", c64, ReduceOp.SUM) == (nccl.NCCL_FLOAT32, 2, nccl.NCCL_SUM, False)
    avg = backend._reduction("all_reduce", f32, ReduceOp.AVG)
    if version >= REDUCE_OPS[ReduceOp.AVG].since:
        assert avg == (nccl.NCCL_FLOAT32, 1, nccl.NCCL_AVG, False)
        assert backend._reduction("all_reduce", bf16, ReduceOp.MAX)[0] == 9
    else:       # NCCL < 2.10: AVG is a SUM and a division; bfloat16 is refused
        assert avg == (nccl.NCCL_FLOAT32, 1, nccl.NCCL_SUM, True)
        with pytest.raises(ValueError, match="bfloat16 needs NCCL >= 2.10"):
            backend._reduction("all_reduce", bf16, ReduceOp.MAX)


def test_cupy_unique_id_round_trips():
    nccl = _cupy_nccl()
    try:
        raw = nccl.get_unique_id()
    except nccl.NcclError as exc:      # a host without a usable network interface for NCCL's bootstrap
        pytest.skip(f"ncclGetUniqueId failed here: {exc}")
    data = id_to_bytes(raw)
    assert len(data) == 128
    # what comm_init_rank hands CuPy: bytes (CuPy >= 14) or this tuple (older), both of CuPy's own id
    assert id_to_tuple(data) == (raw if isinstance(raw, tuple) else id_to_tuple(raw))
