"""The "mpi" communication backend: NCCL's interface over mpi4py, for CPU tensors.

Arrays are handed to MPI without copies: the frontend passes C-contiguous
numpy arrays and this module describes them to MPI in place. Every call is
nonblocking (`I...`) so the frontend can poll it under the collective
watchdog; MPI has no average, so AVG is a SUM finished by a division.
Types MPI lacks (float16, bfloat16, float8) travel as fixed-size byte
records and are reduced by user-defined MPI ops written with numpy, in
float32 precision and rounded once per pairwise step, as NCCL does.
Point-to-point messages carry their dtype and element count in the MPI tag;
receives accept any tag and raise MessageMismatch when the message is not
what they expected (collectives are checked by the frontend, oarlock_xccl.agreement).
"""

from __future__ import annotations

import secrets
import struct

import numpy as np

from oarlock_xccl import world
from oarlock_xccl.agreement import MessageMismatch, dtype_code, dtype_of
from oarlock_xccl.backend import DONE, CommBackend, ReduceOp, Work

# oarlock dtype name -> the MPI predefined datatype of the same layout
_NATIVE = {"float32": "FLOAT", "float64": "DOUBLE", "int8": "INT8_T", "int16": "INT16_T", "int32": "INT32_T",
           "int64": "INT64_T", "uint8": "UINT8_T", "bool": "C_BOOL", "complex64": "C_FLOAT_COMPLEX",
           "complex128": "C_DOUBLE_COMPLEX"}
_MPI_OP = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "SUM", ReduceOp.MAX: "MAX", ReduceOp.MIN: "MIN",
           ReduceOp.PROD: "PROD"}
# bool has no arithmetic: sum and max are "any", product and min are "all" (torch's rule)
_BOOL_OP = {ReduceOp.SUM: "LOR", ReduceOp.MAX: "LOR", ReduceOp.PROD: "LAND", ReduceOp.MIN: "LAND"}
_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_NUMPY_REDUCE = {ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PROD: np.multiply,
                 ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}
_UNIQUE_ID_SIZE = 128
_UID_HEADER = struct.Struct("<iI")    # (root's world rank, root's sequence number)
# A point-to-point message's tag carries what was sent: dtype code << 24 | element count mod 2**24
# (MPICH's MPI_TAG_UB is 2**29 - 1; with a smaller bound the tag wraps and the byte count still
# tells most mismatches). Receives take any tag and compare it with what they expect.
_TAG_COUNT_BITS = 24
_COUNT_MASK = (1 << _TAG_COUNT_BITS) - 1
_FULL_TAG_BOUND = (1 << 29) - 1     # tags up to here hold every dtype code unwrapped
_tag_bound: int | None = None


class _RequestWork(Work):
    """MPI requests in flight, and what to do once they complete (AVG's division)."""

    __slots__ = ("requests", "finish")

    def __init__(self, requests, finish=None):
        self.requests, self.finish = requests, finish

    def test(self) -> bool:
        requests = self.requests
        if requests is None:
            return True
        done = requests.Test() if not isinstance(requests, list) else world.MPI.Request.Testall(requests)
        if done:
            self._complete()
        return done

    def wait(self) -> None:
        if self.requests is not None:
            requests = self.requests if isinstance(self.requests, list) else [self.requests]
            world.MPI.Request.Waitall(requests)
            self._complete()

    def _complete(self):
        self.requests = None
        if self.finish is not None:
            finish, self.finish = self.finish, None
            finish()


class _PointToPointWork(_RequestWork):
    """Sends and receives in flight. Receives take any tag; once they complete, each one's status
    is compared with what it expected, and a message that does not match raises MessageMismatch."""

    __slots__ = ("receives", "statuses")

    def __init__(self, requests: list, receives: list):
        super().__init__(requests)
        self.receives = receives        # per request: a _Receive, or None for a send
        self.statuses = [world.MPI.Status() for _ in requests]

    def test(self) -> bool:
        return self._settle(world.MPI.Request.Testall)

    def wait(self) -> None:
        self._settle(world.MPI.Request.Waitall)

    def _settle(self, complete) -> bool:
        if self.requests is None:
            return True
        MPI = world.MPI
        try:
            done = complete(self.requests, self.statuses)
        except MPI.Exception as exc:    # MPI_ERR_IN_STATUS: a message longer than its receive
            self.requests = None
            raise self._mismatch(failed=True) or exc from None
        if done is not False:           # Waitall returns None
            self._complete()
            mismatch = self._mismatch(failed=False)
            if mismatch is not None:
                raise mismatch
        return done is not False

    def _mismatch(self, failed: bool) -> MessageMismatch | None:
        MPI = world.MPI
        for receive, status in zip(self.receives, self.statuses):
            if receive is None:
                continue
            error = status.Get_error() if failed else 0
            truncated = error != 0 and MPI.Get_error_class(error) == MPI.ERR_TRUNCATE
            if error == 0 or truncated:     # skip receives still pending when another one failed
                mismatch = receive.mismatch(status, truncated)
                if mismatch is not None:
                    return mismatch
        return None


def _tag(dtype, count: int) -> int:
    global _tag_bound
    if _tag_bound is None:
        _tag_bound = world.MPI.COMM_WORLD.Get_attr(world.MPI.TAG_UB)
    return ((dtype_code(dtype) << _TAG_COUNT_BITS) | (count & _COUNT_MASK)) % (_tag_bound + 1)


class _Receive:
    """What a posted receive expects: the sender's tag and byte count for `count` elements of `dtype`."""

    __slots__ = ("peer", "dtype", "count", "itemsize", "tag")

    def __init__(self, peer: int, dtype, count: int, itemsize: int):
        self.peer, self.dtype, self.count, self.itemsize = peer, dtype, count, itemsize
        self.tag = _tag(dtype, count)

    def mismatch(self, status, truncated: bool) -> MessageMismatch | None:
        """The error for a message that is not what this receive expects (`truncated`: it was
        longer than the receive), else None."""
        received = status.Get_count(world.MPI.BYTE)
        if not truncated and status.tag == self.tag and received == self.count * self.itemsize:
            return None
        sent = dtype_of(status.tag >> _TAG_COUNT_BITS) if _tag_bound >= _FULL_TAG_BOUND else None
        if sent is not None:
            count = status.tag & _COUNT_MASK if truncated else received // sent.itemsize
            what = f"{sent.name}[{count}]"
        else:
            what = "a longer message" if truncated else f"a message of {received} byte(s)"
        return MessageMismatch(self.peer, what, f"{self.dtype.name}[{self.count}]")


def _divide_in_place(array: np.ndarray, n: int):
    """AVG's last step; integers truncate toward zero, as NCCL's ncclAvg does."""
    if array.dtype.kind in "iu":
        array[...] = np.trunc(array / n).astype(array.dtype)
    else:
        array /= np.asarray(n, dtype=array.dtype) if array.dtype.kind == "c" else n


class MPIBackend(CommBackend):
    """CPU tensors over MPI (mpi4py), with the NCCL-shaped interface of `CommBackend`."""

    name = "mpi"
    device_types = ("cpu",)
    unique_id_size = _UNIQUE_ID_SIZE
    has_all_to_all = True

    def __init__(self):
        self._uid_sequence = 0
        self._user_ops: dict = {}
        self._records: dict = {}
        self._grouped: list | None = None

    def available(self) -> tuple[bool, str]:
        try:
            import mpi4py.MPI  # noqa: F401
        except ImportError as exc:
            return False, f"mpi4py cannot load an MPI library ({exc}); pip install mpi4py mpich"
        return True, ""

    # -- communicators: NCCL's bootstrap, with MPI point-to-point as the transport -------------------
    def get_unique_id(self) -> bytes:
        self._uid_sequence += 1
        header = _UID_HEADER.pack(world.MPI.COMM_WORLD.rank, self._uid_sequence)
        return header + secrets.token_bytes(_UNIQUE_ID_SIZE - len(header))

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int):
        """Members report their world rank to the id's root, which sends back the ordered list;
        then the members alone build the communicator (MPI_Comm_create_group)."""
        MPI = world.MPI
        root, sequence = _UID_HEADER.unpack_from(unique_id)
        tag = 100 + sequence % 30000
        boot, me = world.bootstrap_comm(), MPI.COMM_WORLD.rank
        if rank == 0:
            members = [me] + [0] * (nranks - 1)
            for _ in range(nranks - 1):
                member_rank, world_rank = boot.recv(source=MPI.ANY_SOURCE, tag=tag)
                members[member_rank] = world_rank
            for world_rank in members[1:]:
                boot.send(members, dest=world_rank, tag=tag)
        else:
            boot.send((rank, me), dest=root, tag=tag)
            members = boot.recv(source=root, tag=tag)
        group = MPI.COMM_WORLD.Get_group().Incl(members)
        try:
            return MPI.COMM_WORLD.Create_group(group, tag)
        finally:
            group.Free()

    def comm_destroy(self, comm) -> None:
        if comm != world.MPI.COMM_NULL:
            comm.Free()

    # -- describing arrays to MPI ---------------------------------------------------------------------
    def _bytes(self, array, count: int):
        """Any array as `count * itemsize` bytes: the layout-agnostic form for data movement."""
        return [array.view(_UINT_OF_SIZE[array.itemsize]) if array.dtype.kind not in "biufc" else array,
                count * array.itemsize, world.MPI.BYTE]

    def _record_type(self, itemsize: int):
        """A committed datatype of `itemsize` bytes, so reductions never split an element."""
        record = self._records.get(itemsize)
        if record is None:
            record = self._records[itemsize] = world.MPI.BYTE.Create_contiguous(itemsize).Commit()
        return record

    def _typed(self, array, count: int, dtype, op, what: str):
        """(buffer spec, MPI op) for a reduction of `dtype` with `op`; errors name the collective."""
        MPI = world.MPI
        native = _NATIVE.get(dtype.name)
        if dtype.name == "bool":
            if op == ReduceOp.AVG:
                raise ValueError(f"{what}(): op AVG is not defined for bool tensors; accepted: SUM, MAX, MIN, PROD")
            return [array, count, MPI.C_BOOL], getattr(MPI, _BOOL_OP[op])
        if dtype.name.startswith("complex") and op in (ReduceOp.MAX, ReduceOp.MIN):
            raise ValueError(f"{what}(): op {ReduceOp(op).name} is not defined for {dtype.name} tensors "
                             f"(complex numbers have no order); accepted: SUM, AVG, PROD")
        if native is not None:
            return [array, count, getattr(MPI, native)], getattr(MPI, _MPI_OP[op])
        view = array.view(_UINT_OF_SIZE[array.itemsize])
        return [view, count, self._record_type(array.itemsize)], self._user_op(dtype.np, op)

    def _user_op(self, np_dtype, op):
        """An MPI op reducing records of a type MPI lacks, computed in float32 like NCCL's kernels."""
        key = (np_dtype, op)
        user_op = self._user_ops.get(key)
        if user_op is None:
            combine = _NUMPY_REDUCE[ReduceOp(op)]

            def reduce_records(inbuf, inoutbuf, datatype):
                incoming = np.frombuffer(inbuf, dtype=np_dtype)
                inout = np.frombuffer(inoutbuf, dtype=np_dtype)
                inout[...] = combine(incoming.astype(np.float32), inout.astype(np.float32)).astype(np_dtype)

            user_op = self._user_ops[key] = world.MPI.Op.Create(reduce_records, commute=True)
        return user_op

    def _averaged(self, array, op, comm):
        return (lambda: _divide_in_place(array, comm.size)) if op == ReduceOp.AVG else None

    # -- collectives ------------------------------------------------------------------------------------
    def all_reduce(self, send, recv, count, dtype, op, comm, stream=None) -> Work:
        recv_spec, mpi_op = self._typed(recv, count, dtype, op, "all_reduce")
        send_spec = world.MPI.IN_PLACE if send is recv else self._typed(send, count, dtype, op, "all_reduce")[0]
        return _RequestWork(comm.Iallreduce(send_spec, recv_spec, mpi_op), self._averaged(recv, op, comm))

    def broadcast(self, send, recv, count, dtype, root, comm, stream=None) -> Work:
        if comm.rank == root and send is not recv:
            np.copyto(recv, send)
        return _RequestWork(comm.Ibcast(self._bytes(recv, count), root))

    def reduce(self, send, recv, count, dtype, op, root, comm, stream=None) -> Work:
        send_spec, mpi_op = self._typed(send, count, dtype, op, "reduce")
        if comm.rank != root:
            return _RequestWork(comm.Ireduce(send_spec, None, mpi_op, root))
        recv_spec = self._typed(recv, count, dtype, op, "reduce")[0]
        request = comm.Ireduce(world.MPI.IN_PLACE if send is recv else send_spec, recv_spec, mpi_op, root)
        return _RequestWork(request, self._averaged(recv, op, comm))

    def all_gather(self, send, recv, count, dtype, comm, stream=None) -> Work:
        # mpi4py's receive count is per rank, as MPI_Allgather's is
        return _RequestWork(comm.Iallgather(self._bytes(send, count), self._bytes(recv, count)))

    def reduce_scatter(self, send, recv, count, dtype, op, comm, stream=None) -> Work:
        # counts are per block, as MPI_Reduce_scatter_block's are
        send_spec, mpi_op = self._typed(send, count, dtype, op, "reduce_scatter")
        recv_spec = self._typed(recv, count, dtype, op, "reduce_scatter")[0]
        return _RequestWork(comm.Ireduce_scatter_block(send_spec, recv_spec, mpi_op), self._averaged(recv, op, comm))

    def all_to_all(self, send, send_counts, recv, recv_counts, dtype, comm, stream=None) -> Work:
        size = send.itemsize

        def layout(counts):
            counts = [int(c) * size for c in counts]
            return counts, [int(d) for d in np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)]

        send_spec = [self._bytes(send, send.size)[0], layout(send_counts), world.MPI.BYTE]
        recv_spec = [self._bytes(recv, recv.size)[0], layout(recv_counts), world.MPI.BYTE]
        return _RequestWork(comm.Ialltoallv(send_spec, recv_spec))

    # -- point to point ------------------------------------------------------------------------------------
    def send(self, send, count, dtype, peer, comm, stream=None) -> Work:
        return self._post(comm.Isend(self._bytes(send, count), dest=peer, tag=_tag(dtype, count)), None)

    def recv(self, recv, count, dtype, peer, comm, stream=None) -> Work:
        request = comm.Irecv(self._bytes(recv, count), source=peer, tag=world.MPI.ANY_TAG)
        return self._post(request, _Receive(peer, dtype, count, recv.itemsize))

    def _post(self, request, receive) -> Work:
        if self._grouped is not None:
            self._grouped.append((request, receive))
            return DONE
        return _PointToPointWork([request], [receive])

    def group_start(self) -> None:
        if self._grouped is not None:
            raise RuntimeError("group_start(): a group is already open; call group_end() first")
        self._grouped = []

    def group_end(self) -> Work:
        if self._grouped is None:
            raise RuntimeError("group_end(): no group is open; call group_start() first")
        posted, self._grouped = self._grouped, None
        return _PointToPointWork([p[0] for p in posted], [p[1] for p in posted]) if posted else DONE
