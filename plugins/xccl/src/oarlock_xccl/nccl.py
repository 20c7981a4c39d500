"""The "nccl" communication backend: NCCL's interface over CuPy's bindings (`cupy.cuda.nccl`), for GPU arrays.

The plugin registers this backend on every machine, so importing this module and
constructing `NCCLBackend` import nothing from CuPy: cupy loads on the first
`available()`, unique id or operation. `available()` says, without raising,
whether cupy, its NCCL library and a GPU are there, and how to get what is missing.

Data movement (broadcast, all_gather, send, recv) moves bytes, so every dtype
travels: bool, int16, complex and float8 included. Reductions need a type NCCL
computes in: bool reduces as uint8 (SUM and MAX are "any", PROD and MIN "all"),
complex SUM/AVG reduce their float parts, and anything else NCCL lacks is a
ValueError naming the collective, the dtype, the op and what is accepted.

Every operation is enqueued on the stream given (cupy's current stream for
None) and returns a Work over a CUDA event recorded after it: `test()` queries
the event (and NCCL's asynchronous error state), `wait()` synchronizes on it.
Between `group_start()` and `group_end()` NCCL launches nothing, so operations
there return a placeholder that follows the Work `group_end()` returns.
"""

from __future__ import annotations

import operator
import threading
import warnings
from typing import NamedTuple

from oarlock_xccl.backend import DONE, CommBackend, ReduceOp, Work

INSTALL_HINT = "pip install 'oarlock-xccl[cuda12]' (CUDA 12) or 'oarlock-xccl[cuda13]' (CUDA 13)"
UNIQUE_ID_SIZE = 128      # NCCL_UNIQUE_ID_BYTES


class NcclType(NamedTuple):
    """One ncclDataType_t: CuPy's name for it, its value in nccl.h (used when the CuPy build predates
    the name), its size in bytes and the first NCCL release (ncclGetVersion's code) that has it."""

    constant: str
    value: int
    size: int
    since: int = 0


class NcclOp(NamedTuple):
    """One ncclRedOp_t, like NcclType."""

    constant: str
    value: int
    since: int = 0


_V2_10, _V2_24 = 21000, 22400     # NCCL 2.10 added bfloat16 and ncclAvg, NCCL 2.24 the float8 types
BYTES = NcclType("NCCL_UINT8", 1, 1)

# oarlock dtype name -> the NCCL type it reduces in (the values are nccl.h's ncclDataType_t)
REDUCE_TYPES = {
    "int8": NcclType("NCCL_INT8", 0, 1),
    "uint8": BYTES,
    "int32": NcclType("NCCL_INT32", 2, 4),
    "int64": NcclType("NCCL_INT64", 4, 8),
    "float16": NcclType("NCCL_FLOAT16", 6, 2),
    "float32": NcclType("NCCL_FLOAT32", 7, 4),
    "float64": NcclType("NCCL_FLOAT64", 8, 8),
    "bfloat16": NcclType("NCCL_BFLOAT16", 9, 2, _V2_10),
    # No CuPy release (14.2 checked) names these yet; NCCL reduces them on sm_90 and newer GPUs only.
    "float8_e4m3fn": NcclType("NCCL_FLOAT8E4M3", 10, 1, _V2_24),
    "float8_e5m2": NcclType("NCCL_FLOAT8E5M2", 11, 1, _V2_24),
}
REDUCE_OPS = {
    ReduceOp.SUM: NcclOp("NCCL_SUM", 0),
    ReduceOp.PROD: NcclOp("NCCL_PROD", 1),
    ReduceOp.MAX: NcclOp("NCCL_MAX", 2),
    ReduceOp.MIN: NcclOp("NCCL_MIN", 3),
    ReduceOp.AVG: NcclOp("NCCL_AVG", 4, _V2_10),
}
# bool has no arithmetic in NCCL: as 0/1 bytes, "any" is MAX and "all" is MIN
BOOL_OPS = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.MAX: ReduceOp.MAX,
            ReduceOp.PROD: ReduceOp.MIN, ReduceOp.MIN: ReduceOp.MIN}
# complex numbers add (and average) part by part; their order and product are not part-wise
COMPLEX_PARTS = {"complex64": "float32", "complex128": "float64"}
COMPLEX_OPS = (ReduceOp.SUM, ReduceOp.AVG)
_REDUCING = ("all_reduce", "reduce", "reduce_scatter")


class ReducePlan(NamedTuple):
    """How NCCL reduces one oarlock dtype with one op: in `type`, `factor` NCCL elements per
    oarlock element (2 for complex), applying `op` (bool's ops become MAX or MIN)."""

    type: NcclType
    factor: int
    op: ReduceOp


def _version_text(code: int) -> str:
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _accepted() -> str:
    names = ", ".join(REDUCE_TYPES)
    return (f"{names} with SUM, MAX, MIN, PROD or AVG; bool with SUM or MAX (any) and PROD or MIN (all); "
            f"{' and '.join(COMPLEX_PARTS)} with SUM or AVG")


def reduce_plan(collective: str, dtype, op) -> ReducePlan:
    """The plan for reducing `dtype` with `op` in `collective`; ValueError when NCCL cannot.
    Depends on nothing but the tables above (no CuPy)."""
    try:
        op = ReduceOp(op)
    except ValueError:
        raise ValueError(f"NCCLBackend.{collective}(): op must be a ReduceOp ({', '.join(o.name for o in ReduceOp)}), "
                         f"got {op!r}") from None
    name = dtype.name
    if name == "bool" and op in BOOL_OPS:
        return ReducePlan(BYTES, 1, BOOL_OPS[op])
    if name in COMPLEX_PARTS and op in COMPLEX_OPS:
        return ReducePlan(REDUCE_TYPES[COMPLEX_PARTS[name]], 2, op)
    if name in REDUCE_TYPES:
        return ReducePlan(REDUCE_TYPES[name], 1, op)
    raise ValueError(f"NCCLBackend.{collective}(): NCCL cannot reduce dtype {name} with op {op.name}; "
                     f"accepted: {_accepted()}. Cast the tensor first (e.g. to float32)")


def movement_bytes(count: int, dtype) -> int:
    """Broadcast, all_gather, send and recv move `count` elements of any dtype as this many bytes."""
    return count * dtype.itemsize


# -- unique ids -------------------------------------------------------------------------------------
def id_to_bytes(raw, what: str = "get_unique_id") -> bytes:
    """CuPy's unique id (bytes from CuPy 14, a tuple of 128 signed chars before) as 128 bytes."""
    data = bytes(raw) if isinstance(raw, (bytes, bytearray, memoryview)) else bytes(v & 0xFF for v in raw)
    if len(data) != UNIQUE_ID_SIZE:
        raise ValueError(f"NCCLBackend.{what}(): a unique id has {UNIQUE_ID_SIZE} bytes, got {len(data)}")
    return data


def id_to_tuple(data: bytes) -> tuple:
    """128 bytes as the tuple of signed chars that CuPy < 14's NcclCommunicator takes."""
    return tuple(b - 256 if b > 127 else b for b in data)


# -- loading CuPy -------------------------------------------------------------------------------------
class _Cuda(NamedTuple):
    cupy: object
    nccl: object        # cupy.cuda.nccl
    version: int        # the loaded NCCL's ncclGetVersion code


_cuda: _Cuda | None = None


def _load() -> _Cuda:
    """cupy and its NCCL bindings, imported once; no GPU needed. ImportError names what is missing."""
    global _cuda
    if _cuda is None:
        try:
            import cupy
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")     # cupy warns (once per process) when libnccl cannot load
                from cupy.cuda import nccl
        except ImportError as exc:
            if exc.name in ("cupy", "cupy.cuda"):     # absent (or a stray folder named cupy on the path)
                reason = f"cupy is not installed: the NCCL backend uses CuPy's NCCL bindings; {INSTALL_HINT}"
            else:
                reason = f"cupy failed to import ({exc}); reinstall it: {INSTALL_HINT}"
            raise ImportError(reason) from exc
        if not nccl.available:
            detail = next((line.strip() for w in caught for line in str(w.message).splitlines()
                           if line.strip().startswith("Reason")), "")
            raise ImportError(f"cupy {cupy.__version__} is installed but cupy.cuda.nccl could not load the NCCL "
                              f"library{' (' + detail + ')' if detail else ''}; install it with "
                              f"pip install nvidia-nccl-cu12 (CUDA 12; part of 'oarlock-xccl[cuda12]')")
        _cuda = _Cuda(cupy, nccl, nccl.get_version())
    return _cuda


def _probe() -> tuple[bool, str]:
    try:
        cuda = _load()
    except ImportError as exc:
        return False, str(exc)
    except Exception as exc:    # a broken CUDA install fails cupy's import in many ways; report, never raise
        return False, f"cupy failed to import ({exc!r}); {INSTALL_HINT}"
    try:
        count = cuda.cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:    # CUDARuntimeError without a driver, or a driver too old for cupy's CUDA
        return False, (f"no usable CUDA GPU: cupy.cuda.runtime.getDeviceCount() failed ({exc}); run on a machine "
                       f"with an NVIDIA GPU and a driver new enough for cupy's CUDA")
    if count == 0:
        return False, ("no CUDA GPU is visible: cupy.cuda.runtime.getDeviceCount() returned 0; check the NVIDIA "
                       "driver and CUDA_VISIBLE_DEVICES")
    return True, ""


# -- communicators and work ----------------------------------------------------------------------------
class NCCLComm:
    """A cupy NcclCommunicator and the device it belongs to (the current one when it was made)."""

    __slots__ = ("nccl", "nranks", "rank", "device")

    def __init__(self, nccl_comm, nranks: int, rank: int, device):
        self.nccl, self.nranks, self.rank, self.device = nccl_comm, nranks, rank, device

    def __repr__(self):
        return f"NCCLComm(rank={self.rank}, nranks={self.nranks}, device={self.device.id})"


def _record(cuda: _Cuda, stream):
    """An event recorded on `stream` (of the current device) after what is queued there."""
    event = cuda.cupy.cuda.Event(block=False, disable_timing=True)
    event.record(stream)
    return event


class EventWork(Work):
    """Operations in flight on CUDA streams: done when every event recorded after them is."""

    __slots__ = ("_events", "_comms")

    def __init__(self, events: list, comms: list):
        self._events, self._comms = events, comms

    def test(self) -> bool:
        events = self._events
        if events is None:
            return True
        for event in events:
            if not event.done:
                # a peer that failed leaves the kernels waiting forever: raise NCCL's error instead
                for comm in self._comms:
                    comm.nccl.check_async_error()
                return False
        self._events = self._comms = None
        return True

    def wait(self) -> None:
        if self._events is not None:
            for event in self._events:
                event.synchronize()
            self._events = self._comms = None


class _Group:
    """The operations issued since the outermost group_start(), launched together by group_end()."""

    __slots__ = ("issued", "work", "member")

    def __init__(self):
        self.issued: list = []      # (comm, stream, finish or None)
        self.work: Work | None = None
        self.member = _GroupMember(self)


class _GroupMember(Work):
    """What an operation inside a group returns: it follows the group's Work once group_end() made it."""

    __slots__ = ("_group",)

    def __init__(self, group: _Group):
        self._group = group

    def test(self) -> bool:
        work = self._group.work
        return work is not None and work.test()

    def wait(self) -> None:
        if self._group.work is None:
            raise RuntimeError("NCCLBackend: wait() on an operation issued between group_start() and group_end() "
                               "before group_end(): NCCL launches grouped operations at group_end()")
        self._group.work.wait()


class _GroupState(threading.local):
    depth = 0               # NCCL groups nest; only the outermost group_end launches
    group: _Group | None = None


def _pointer(array, collective: str, argument: str) -> int:
    """The device address of a cupy array (or any __cuda_array_interface__ array); 0 for None."""
    if array is None:
        return 0
    data = getattr(array, "data", None)
    ptr = getattr(data, "ptr", None)
    if ptr is not None:
        return ptr
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(f"NCCLBackend.{collective}(): {argument} must be a GPU array (cupy, or one with "
                        f"__cuda_array_interface__), got {type(array).__module__}.{type(array).__qualname__}")
    return interface["data"][0]


def _check_rank(value, comm: NCCLComm, collective: str, argument: str) -> int:
    try:
        rank = operator.index(value)
    except TypeError:
        rank = -1
    if isinstance(value, bool) or not 0 <= rank < comm.nranks:
        raise ValueError(f"NCCLBackend.{collective}(): {argument} must be an int rank in [0, {comm.nranks}), "
                         f"got {value!r}")
    return rank


_trunc_div_kernel = None


def divide_in_place(array, count: int, dtype, divisor: int) -> None:
    """array[:count] /= divisor on the current stream, truncating for integers: AVG as SUM then a
    division, where NCCL has no ncclAvg."""
    global _trunc_div_kernel
    cupy = _load().cupy
    flat = array.reshape(-1)[:count]
    if dtype.is_integer:
        if _trunc_div_kernel is None:
            # C's integer division truncates toward zero; cupy's floor_divide rounds down
            _trunc_div_kernel = cupy.ElementwiseKernel("int64 n", "T x", "x = x / n", "oarlock_trunc_div")
        _trunc_div_kernel(divisor, flat)
    elif dtype.name in ("float16", "float32", "float64", "complex64", "complex128"):
        flat /= divisor
    else:
        raise ValueError(f"NCCLBackend: AVG of dtype {dtype.name} needs ncclAvg (NCCL >= 2.10); this process loaded "
                         f"NCCL {_version_text(_load().version)}: pip install -U nvidia-nccl-cu12")


class NCCLBackend(CommBackend):
    """NCCL over cupy.cuda.nccl for "gpu" arrays (and devices deriving from "gpu")."""

    name = "nccl"
    device_types = ("gpu",)
    unique_id_size = UNIQUE_ID_SIZE
    has_all_to_all = False      # NCCL has none: the frontend posts grouped sends and receives

    def __init__(self):
        self._availability: tuple[bool, str] | None = None
        self._plans: dict = {}          # (dtype, op) -> (nccl type, factor, nccl op, divide after)
        self._state = _GroupState()

    # -- library ---------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        if self._availability is None:
            self._availability = _probe()
        return self._availability

    def _require(self, what: str) -> _Cuda:
        usable, reason = self.available()
        if not usable:
            raise RuntimeError(f"NCCLBackend.{what}(): the NCCL backend is unavailable: {reason}")
        return _load()

    def _constant(self, entry, collective: str, what: str) -> int:
        """The value of a type or op: CuPy's, else nccl.h's (CuPy may predate it), if the loaded NCCL has it."""
        cuda = _load()
        if cuda.version < entry.since:
            raise ValueError(f"NCCLBackend.{collective}(): {what} needs NCCL >= {_version_text(entry.since)}; this "
                             f"process loaded NCCL {_version_text(cuda.version)}: pip install -U nvidia-nccl-cu12")
        return getattr(cuda.nccl, entry.constant, entry.value)

    def _reduction(self, collective: str, dtype, op) -> tuple:
        """(NCCL type, elements per oarlock element, NCCL op, divide by nranks afterwards)."""
        key = (dtype, op)
        found = self._plans.get(key)
        if found is None:
            plan = reduce_plan(collective, dtype, op)
            what = f"reducing {dtype.name}"
            ntype = self._constant(plan.type, collective, what)
            divide = plan.op is ReduceOp.AVG and _load().version < REDUCE_OPS[ReduceOp.AVG].since
            nop = self._constant(REDUCE_OPS[ReduceOp.SUM if divide else plan.op], collective, what)
            found = self._plans[key] = (ntype, plan.factor, nop, divide)
        return found

    # -- communicators -----------------------------------------------------------------------------
    def get_unique_id(self) -> bytes:
        return id_to_bytes(self._require("get_unique_id").nccl.get_unique_id())

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int) -> NCCLComm:
        if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
            raise ValueError(f"NCCLBackend.comm_init_rank(): nranks must be a positive int, got {nranks!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < nranks:
            raise ValueError(f"NCCLBackend.comm_init_rank(): rank must be an int in [0, {nranks}), got {rank!r}")
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != UNIQUE_ID_SIZE:
            raise ValueError(f"NCCLBackend.comm_init_rank(): unique_id must be the {UNIQUE_ID_SIZE} bytes of "
                             f"get_unique_id(), got {type(unique_id).__name__} of length "
                             f"{len(unique_id) if hasattr(unique_id, '__len__') else '?'}")
        cuda = self._require("comm_init_rank")
        # ncclCommInitRank binds the communicator to the current device: make it current (creating its context)
        device = cuda.cupy.cuda.Device()
        device.use()
        try:
            handle = cuda.nccl.NcclCommunicator(nranks, bytes(unique_id), rank)
        except TypeError:
            # CuPy < 14 takes the id as a tuple of 128 signed chars (the type check fails before NCCL is called)
            handle = cuda.nccl.NcclCommunicator(nranks, id_to_tuple(bytes(unique_id)), rank)
        return NCCLComm(handle, nranks, rank, device)

    def comm_destroy(self, comm: NCCLComm) -> None:
        with comm.device:
            comm.nccl.destroy()

    def comm_abort(self, comm: NCCLComm) -> None:
        """Abort the communicator's operations in flight and free it (after a timeout or a peer's failure)."""
        with comm.device:
            comm.nccl.abort()

    # -- issuing ----------------------------------------------------------------------------------------
    def _issue(self, comm: NCCLComm, stream, launch, finish=None) -> Work:
        """launch(nccl communicator, stream pointer) on the comm's device; finish() runs on the same
        stream once NCCL's kernels are queued there (at once, or at group_end inside a group)."""
        cuda = _cuda
        with comm.device:
            if stream is None:
                stream = cuda.cupy.cuda.get_current_stream()
            launch(comm.nccl, stream.ptr)
            group = self._state.group
            if group is not None:
                group.issued.append((comm, stream, finish))
                return group.member
            if finish is not None:
                with stream:
                    finish()
            return EventWork([_record(cuda, stream)], [comm])

    def _averaging(self, divide: bool, recv, count: int, dtype, comm: NCCLComm):
        if not divide:
            return None
        return lambda: divide_in_place(recv, count, dtype, comm.nranks)

    # -- collectives ------------------------------------------------------------------------------------
    def all_reduce(self, send, recv, count, dtype, op, comm, stream=None) -> Work:
        ntype, factor, nop, divide = self._reduction("all_reduce", dtype, op)
        sp, rp = _pointer(send, "all_reduce", "send"), _pointer(recv, "all_reduce", "recv")
        return self._issue(comm, stream, lambda c, s: c.allReduce(sp, rp, count * factor, ntype, nop, s),
                           self._averaging(divide, recv, count, dtype, comm))

    def broadcast(self, send, recv, count, dtype, root, comm, stream=None) -> Work:
        root = _check_rank(root, comm, "broadcast", "root")
        rp = _pointer(recv, "broadcast", "recv")
        sp = rp if send is None else _pointer(send, "broadcast", "send")   # send matters on root only
        nbytes = movement_bytes(count, dtype)
        return self._issue(comm, stream, lambda c, s: c.broadcast(sp, rp, nbytes, BYTES.value, root, s))

    def reduce(self, send, recv, count, dtype, op, root, comm, stream=None) -> Work:
        ntype, factor, nop, divide = self._reduction("reduce", dtype, op)
        root = _check_rank(root, comm, "reduce", "root")
        sp, rp = _pointer(send, "reduce", "send"), _pointer(recv, "reduce", "recv")   # recv may be None off root
        return self._issue(comm, stream, lambda c, s: c.reduce(sp, rp, count * factor, ntype, nop, root, s),
                           self._averaging(divide and comm.rank == root, recv, count, dtype, comm))

    def all_gather(self, send, recv, count, dtype, comm, stream=None) -> Work:
        sp, rp = _pointer(send, "all_gather", "send"), _pointer(recv, "all_gather", "recv")
        nbytes = movement_bytes(count, dtype)
        return self._issue(comm, stream, lambda c, s: c.allGather(sp, rp, nbytes, BYTES.value, s))

    def reduce_scatter(self, send, recv, count, dtype, op, comm, stream=None) -> Work:
        ntype, factor, nop, divide = self._reduction("reduce_scatter", dtype, op)
        sp, rp = _pointer(send, "reduce_scatter", "send"), _pointer(recv, "reduce_scatter", "recv")
        return self._issue(comm, stream, lambda c, s: c.reduceScatter(sp, rp, count * factor, ntype, nop, s),
                           self._averaging(divide, recv, count, dtype, comm))

    def all_to_all(self, send, send_counts, recv, recv_counts, dtype, comm, stream=None) -> Work:
        raise NotImplementedError("NCCLBackend.all_to_all(): NCCL has no all-to-all (has_all_to_all is False); "
                                  "post send() and recv() per peer between group_start() and group_end()")

    # -- point to point ---------------------------------------------------------------------------------
    def send(self, send, count, dtype, peer, comm, stream=None) -> Work:
        peer = _check_rank(peer, comm, "send", "peer")
        sp, nbytes = _pointer(send, "send", "send"), movement_bytes(count, dtype)
        return self._issue(comm, stream, lambda c, s: c.send(sp, nbytes, BYTES.value, peer, s))

    def recv(self, recv, count, dtype, peer, comm, stream=None) -> Work:
        peer = _check_rank(peer, comm, "recv", "peer")
        rp, nbytes = _pointer(recv, "recv", "recv"), movement_bytes(count, dtype)
        return self._issue(comm, stream, lambda c, s: c.recv(rp, nbytes, BYTES.value, peer, s))

    def group_start(self) -> None:
        self._require("group_start").nccl.groupStart()
        state = self._state
        state.depth += 1
        if state.depth == 1:
            state.group = _Group()

    def group_end(self) -> Work:
        state = self._state
        if state.depth == 0:
            raise RuntimeError("NCCLBackend.group_end(): called without a matching group_start()")
        state.depth -= 1
        group = state.group
        if state.depth:
            _cuda.nccl.groupEnd()
            return group.member
        state.group = None          # cleared first, so a failing groupEnd leaves no group open
        _cuda.nccl.groupEnd()
        group.work = self._launched(group.issued) if group.issued else DONE
        return group.work

    def _launched(self, issued: list) -> Work:
        """After the outermost groupEnd: run the finishing steps, then record one event per stream used
        (after every step queued on it)."""
        cuda, streams, comms = _cuda, {}, []
        for comm, stream, finish in issued:
            if finish is not None:
                with comm.device, stream:
                    finish()
            streams.setdefault((comm.device.id, stream.ptr), (comm.device, stream))
            if comm not in comms:
                comms.append(comm)
        events = []
        for device, stream in streams.values():
            with device:
                events.append(_record(cuda, stream))
        return EventWork(events, comms)
