"""Check the "nccl" communication backend on one GPU and time its all_reduce against raw cupy.cuda.nccl.

NCCL refuses two ranks on one GPU, so this runs a world of one rank: every
collective's result must equal its input, bit for bit, which still checks the
dtype mapping, the element and byte counts (buffers are odd-sized and outputs
start as garbage), pointers, streams, events and grouping. Two modes:

  direct  NCCLBackend's methods on raw cupy arrays (needs only cupy + NCCL);
  tensor  oarlock.distributed on GPU tensors: init_parallel_env(), then the
          collectives on oarlock.to_tensor(..., place="gpu") (needs the GPU
          device backend; skipped when it is missing, unless asked for).

Then all_reduce is timed from 1 KiB to 64 MiB (float32, SUM, in place) through
raw NcclCommunicator.allReduce, NCCLBackend.all_reduce and, in tensor mode,
oarlock.distributed.all_reduce, on the same communicator in the same run. With
one rank NCCL moves no data, so the figures are per-call overheads.

Needs: pip install -e 'plugins/xccl[cuda12]' (cupy-cuda12x and nvidia-nccl-cu12) plus NVRTC for
cupy's kernels (pip install 'cupy-cuda12x[ctk]' where no CUDA toolkit is installed).

    python bench/nccl_check.py [--mode auto|direct|tensor] [--count 100003] [--timeout 110]

Prints a PASS/FAIL line per check and a summary; exits 1 on any failure (or on the timeout).
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import sys
import time
import traceback

import numpy as np

DTYPES = ("float32", "bfloat16", "float16", "int64", "bool")
MOVED_ONLY = ("complex64", "int16", "float8_e4m3fn")        # dtypes NCCL moves as bytes (and may refuse to reduce)
SIZES = [1024 << (2 * i) for i in range(9)]                  # 1 KiB .. 64 MiB


class Skip(Exception):
    """A check that cannot run here (not a failure)."""


class Report:
    """PASS / FAIL / SKIP per check, printed as they run."""

    def __init__(self):
        self.results: list[tuple[str, str, str]] = []

    def check(self, name: str, fn) -> bool:
        try:
            fn()
            status, detail = "PASS", ""
        except Skip as exc:
            status, detail = "SKIP", str(exc)
        except Exception as exc:
            status, detail = "FAIL", f"{type(exc).__name__}: {exc}"
            traceback.print_exc(limit=4, file=sys.stdout)
        self.results.append((name, status, detail))
        print(f"{status:4}  {name}" + (f"  -- {detail}" if detail else ""), flush=True)
        return status == "PASS"

    def count(self, status: str) -> int:
        return sum(1 for _, s, _ in self.results if s == status)


# -- data ------------------------------------------------------------------------------------------
def sample(name: str, count: int, seed: int) -> np.ndarray:
    """Small integers (exact in every dtype, never -0.0 or NaN), in dtype `name`."""
    from oarlock.dtypes import convert_dtype
    rng = np.random.default_rng(seed)
    if name == "bool":
        return rng.random(count) < 0.5
    values = rng.integers(-8, 9, count)
    if name.startswith("complex"):
        values = values + 1j * rng.integers(-8, 9, count)
    return values.astype(convert_dtype(name).np)


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(f"u{array.dtype.itemsize}") if array.dtype.itemsize in (1, 2, 4, 8) else array.view(np.uint8)


def expect_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.ascontiguousarray(got).reshape(-1), np.ascontiguousarray(want).reshape(-1)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: got {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
    bad = np.flatnonzero(_bits(got) != _bits(want))
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{what}: {bad.size} of {got.size} elements differ; first at {i}: "
                             f"got {got[i]!r}, expected {want[i]!r}")


def to_device(cupy, array: np.ndarray):
    """A cupy array holding `array`'s bytes (cupy has no bfloat16/float8: those travel as uint)."""
    if array.dtype.isbuiltin != 1:
        array = array.view(f"u{array.dtype.itemsize}")
    return cupy.asarray(array)


def garbage_like(cupy, array: np.ndarray):
    return to_device(cupy, np.full(array.nbytes, 0xA5, np.uint8).view(array.dtype).reshape(array.shape))


def to_host(device_array, np_dtype) -> np.ndarray:
    return device_array.get().view(np_dtype)


def finish(work, what: str, timeout: float = 20.0) -> None:
    """Poll work.test() as the collective watchdog does, then wait()."""
    deadline = time.monotonic() + timeout
    while not work.test():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: Work.test() still False after {timeout:g} s")
    work.wait()
    if not work.test():
        raise AssertionError(f"{what}: Work.test() False after wait()")


# -- direct mode: NCCLBackend on raw cupy arrays ---------------------------------------------------
class Direct:
    def __init__(self, count: int):
        import cupy

        from oarlock.dtypes import convert_dtype
        from oarlock_xccl.backend import ReduceOp
        from oarlock_xccl.nccl import NCCLBackend, reduce_plan
        self.cupy, self.dtype_of, self.ReduceOp, self.reduce_plan = cupy, convert_dtype, ReduceOp, reduce_plan
        self.count = count
        self.backend = NCCLBackend()
        usable, reason = self.backend.available()
        if not usable:
            raise RuntimeError(f"NCCLBackend.available() is False: {reason}")
        unique_id = self.backend.get_unique_id()
        assert isinstance(unique_id, bytes) and len(unique_id) == 128, unique_id
        self.comm = self.backend.comm_init_rank(1, unique_id, 0)
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def refused(self, collective: str, name: str, op) -> bool:
        try:
            self.reduce_plan(collective, self.dtype_of(name), op)
        except ValueError:
            return True
        return False

    def communicator(self):
        nc = self.comm.nccl
        got = (nc.rank_id(), nc.size(), nc.device_id())
        want = (0, 1, self.cupy.cuda.Device().id)
        if got != want:
            raise AssertionError(f"(rank, size, device) of the communicator: {got}, expected {want}")

    def _reduce_or_refuse(self, collective, name, op, issue) -> None:
        """Issue a reduction and wait for it; refused combinations must raise ValueError instead."""
        if self.refused(collective, name, op):
            try:
                issue()
            except ValueError:
                return
            raise AssertionError(f"{collective} {name} {op.name}: expected ValueError (NCCL cannot reduce it)")
        try:
            work = issue()
        except ValueError as exc:
            if "needs NCCL >=" in str(exc):       # float8 before NCCL 2.24: refused by version, not a bug
                raise Skip(str(exc)) from None
            raise
        finish(work, f"{collective} {name} {op.name}")

    def all_reduce(self, name, op, in_place=False):
        x = sample(name, self.count, 1)
        send = to_device(self.cupy, x)
        recv = send if in_place else garbage_like(self.cupy, x)
        dtype = self.dtype_of(name)
        issue = lambda: self.backend.all_reduce(send, recv, x.size, dtype, op, self.comm, self.stream)
        self._reduce_or_refuse("all_reduce", name, op, issue)
        if not self.refused("all_reduce", name, op):
            expect_equal(to_host(recv, x.dtype), x, f"all_reduce {name} {op.name}")

    def reduce(self, name, op):
        x = sample(name, self.count, 2)
        send, recv = to_device(self.cupy, x), garbage_like(self.cupy, x)
        issue = lambda: self.backend.reduce(send, recv, x.size, self.dtype_of(name), op, 0, self.comm, self.stream)
        self._reduce_or_refuse("reduce", name, op, issue)
        if not self.refused("reduce", name, op):
            expect_equal(to_host(recv, x.dtype), x, f"reduce {name} {op.name}")

    def reduce_scatter(self, name, op):
        x = sample(name, self.count, 3)
        send, recv = to_device(self.cupy, x), garbage_like(self.cupy, x)
        issue = lambda: self.backend.reduce_scatter(send, recv, x.size, self.dtype_of(name), op, self.comm,
                                                    self.stream)
        self._reduce_or_refuse("reduce_scatter", name, op, issue)
        if not self.refused("reduce_scatter", name, op):
            expect_equal(to_host(recv, x.dtype), x, f"reduce_scatter {name} {op.name}")

    def broadcast(self, name, in_place=False):
        x = sample(name, self.count, 4)
        send = to_device(self.cupy, x)
        recv = send if in_place else garbage_like(self.cupy, x)
        finish(self.backend.broadcast(send, recv, x.size, self.dtype_of(name), 0, self.comm, self.stream),
               "broadcast")
        expect_equal(to_host(recv, x.dtype), x, f"broadcast {name}")

    def all_gather(self, name):
        x = sample(name, self.count, 5)
        send, recv = to_device(self.cupy, x), garbage_like(self.cupy, x)
        finish(self.backend.all_gather(send, recv, x.size, self.dtype_of(name), self.comm, self.stream),
               "all_gather")
        expect_equal(to_host(recv, x.dtype), x, f"all_gather {name}")

    def send_recv_self(self, name, nested=False):
        """send to and recv from rank 0 (itself) inside a group; the group's Work covers both."""
        x = sample(name, self.count, 6)
        send, recv = to_device(self.cupy, x), garbage_like(self.cupy, x)
        dtype, backend = self.dtype_of(name), self.backend
        backend.group_start()
        if nested:
            backend.group_start()
        inner = backend.send(send, x.size, dtype, 0, self.comm, self.stream)
        backend.recv(recv, x.size, dtype, 0, self.comm, self.stream)
        if nested:
            backend.group_end()
            if inner.test():
                raise AssertionError("an operation of an unfinished outer group reports done")
        work = backend.group_end()
        finish(work, "group")
        if not inner.test():
            raise AssertionError("an operation inside the group is not done after the group's Work is")
        expect_equal(to_host(recv, x.dtype), x, f"send/recv {name}")

    def default_stream(self):
        """stream=None: cupy's current stream."""
        x = sample("float32", self.count, 7)
        send, recv = to_device(self.cupy, x), garbage_like(self.cupy, x)
        with self.stream:
            work = self.backend.all_reduce(send, recv, x.size, self.dtype_of("float32"), self.ReduceOp.SUM,
                                           self.comm)
        finish(work, "all_reduce on the current stream")
        expect_equal(to_host(recv, x.dtype), x, "all_reduce with stream=None")

    def test_does_not_block(self):
        """Behind a ~0.2 s kernel, test() must answer False at once, then wait() must finish the work."""
        cupy = self.cupy
        spin = cupy.RawKernel(r'''extern "C" __global__ void spin(long long cycles) {
            long long start = clock64(); while (clock64() - start < cycles) { } }''', "spin")
        buf = cupy.zeros(1024, cupy.float32)
        # clockRate (kHz) is gone from CUDA 13's properties: assume 2 GHz there
        rate_khz = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id).get("clockRate", 2_000_000)
        with self.stream:
            spin((1,), (1,), (np.int64(rate_khz * 200),))     # ~200 ms
        work = self.backend.all_reduce(buf, buf, buf.size, self.dtype_of("float32"), self.ReduceOp.SUM, self.comm,
                                       self.stream)
        start = time.perf_counter()
        done = work.test()
        spent = time.perf_counter() - start
        if done:
            raise AssertionError("test() reported done while a 200 ms kernel was still ahead on the stream")
        if spent > 1e-3:
            raise AssertionError(f"test() took {spent * 1e6:.0f} us; it must not block")
        work.wait()
        if not work.test():
            raise AssertionError("test() False after wait()")
        polls = 2000
        start = time.perf_counter()
        for _ in range(polls):
            work.test()
        print(f"      test() on finished work: {(time.perf_counter() - start) / polls * 1e6:.2f} us per call")

    def divide_fallback(self):
        """AVG without ncclAvg (NCCL < 2.10) divides after a SUM: check that division on the GPU."""
        from oarlock_xccl.nccl import divide_in_place
        cupy = self.cupy
        for name in ("int32", "int64", "uint8", "float16", "float32", "complex64"):
            x = sample(name, self.count, 8) if name != "uint8" else np.arange(self.count, dtype=np.uint8)
            device = to_device(cupy, x)
            with self.stream:
                divide_in_place(device, x.size - 1, self.dtype_of(name), 3)   # the last element stays
            self.stream.synchronize()
            want = x.copy()
            if np.issubdtype(x.dtype, np.integer):
                want[:-1] = np.sign(x[:-1]) * (np.abs(x[:-1]) // 3)          # truncation toward zero
            else:
                want[:-1] = x[:-1] / x.dtype.type(3)
            expect_equal(to_host(device, x.dtype), want, f"divide_in_place {name}")

    def refusals_are_named(self):
        x = to_device(self.cupy, sample("int16", 8, 9))
        try:
            self.backend.all_reduce(x, x, 8, self.dtype_of("int16"), self.ReduceOp.SUM, self.comm, self.stream)
        except ValueError as exc:
            if "int16" not in str(exc) or "all_reduce" not in str(exc):
                raise AssertionError(f"the error does not name the call and dtype: {exc}") from None
            return
        raise AssertionError("all_reduce of int16 did not raise ValueError")

    def run(self, report: Report) -> None:
        ReduceOp = self.ReduceOp
        report.check("direct communicator (rank, size, device)", self.communicator)
        for name in DTYPES + MOVED_ONLY:
            for op in ReduceOp:
                report.check(f"direct all_reduce {name} {op.name}", lambda n=name, o=op: self.all_reduce(n, o))
            report.check(f"direct all_reduce {name} SUM in place",
                         lambda n=name: self.all_reduce(n, ReduceOp.SUM, in_place=True))
            report.check(f"direct reduce {name} SUM", lambda n=name: self.reduce(n, ReduceOp.SUM))
            report.check(f"direct reduce {name} AVG", lambda n=name: self.reduce(n, ReduceOp.AVG))
            report.check(f"direct reduce_scatter {name} SUM", lambda n=name: self.reduce_scatter(n, ReduceOp.SUM))
            report.check(f"direct reduce_scatter {name} MAX", lambda n=name: self.reduce_scatter(n, ReduceOp.MAX))
            report.check(f"direct broadcast {name}", lambda n=name: self.broadcast(n))
            report.check(f"direct broadcast {name} in place", lambda n=name: self.broadcast(n, in_place=True))
            report.check(f"direct all_gather {name}", lambda n=name: self.all_gather(n))
            report.check(f"direct send/recv to self {name}", lambda n=name: self.send_recv_self(n))
        report.check("direct send/recv in nested groups", lambda: self.send_recv_self("float32", nested=True))
        report.check("direct stream=None uses the current stream", self.default_stream)
        report.check("direct Work.test() does not block", self.test_does_not_block)
        report.check("direct AVG fallback division", self.divide_fallback)
        report.check("direct int16 reduction refused by name", self.refusals_are_named)

    def close(self):
        self.backend.comm_destroy(self.comm)


# -- tensor mode: oarlock.distributed on GPU tensors ---------------------------------------------------------
class Tensors:
    def __init__(self, count: int, required: bool):
        import oarlock
        from oarlock_xccl.backend import ReduceOp
        self.oarlock, self.ReduceOp, self.count = oarlock, ReduceOp, count
        try:
            oarlock.to_tensor(np.zeros(2, np.float32), place="gpu")
        except Exception as exc:
            if required:
                raise
            raise Skip(f"no GPU tensors here ({type(exc).__name__}: {exc}); the GPU device backend is not "
                       f"installed") from exc
        self.dist = oarlock.distributed
        self.dist.init_parallel_env()

    def tensor(self, x):
        return self.oarlock.to_tensor(x, place="gpu")

    def backend_used(self):
        from oarlock_xccl import groups
        comms = getattr(groups.get_group(0), "_comms", {})
        if "nccl" not in comms:
            raise AssertionError(f"the world group's communicators are {sorted(comms)}, not nccl")

    def _refused(self, name, op):
        from oarlock.dtypes import convert_dtype
        from oarlock_xccl.nccl import reduce_plan
        try:
            reduce_plan("all_reduce", convert_dtype(name), op)
        except ValueError:
            return True
        return False

    def all_reduce(self, name, op):
        x = sample(name, self.count, 11)
        t = self.tensor(x)
        if self._refused(name, op):
            try:
                self.dist.all_reduce(t, op=op)
            except ValueError:
                return
            raise AssertionError(f"all_reduce {name} {op.name}: expected ValueError")
        self.dist.all_reduce(t, op=op)
        expect_equal(t.numpy(), x, f"all_reduce {name} {op.name}")

    def collectives(self, name):
        x = sample(name, self.count, 12)
        t = self.tensor(x)
        self.dist.broadcast(t, src=0)
        expect_equal(t.numpy(), x, f"broadcast {name}")
        if not self._refused(name, self.ReduceOp.SUM):
            self.dist.reduce(t, dst=0, op=self.ReduceOp.SUM)
            expect_equal(t.numpy(), x, f"reduce {name}")
            out = self.tensor(np.zeros_like(x))
            self.dist.reduce_scatter(out, [self.tensor(x)])
            expect_equal(out.numpy(), x, f"reduce_scatter {name}")
        gathered = []
        self.dist.all_gather(gathered, t)
        if len(gathered) != 1:
            raise AssertionError(f"all_gather {name}: {len(gathered)} tensors for a world of one")
        expect_equal(gathered[0].numpy(), x, f"all_gather {name}")
        received = self.tensor(np.zeros_like(x))
        dist = self.dist
        tasks = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 0), dist.P2POp(dist.irecv, received, 0)])
        for task in tasks:
            task.wait()
        expect_equal(received.numpy(), x, f"isend/irecv to self {name}")

    def run(self, report: Report) -> None:
        for name in DTYPES:
            for op in self.ReduceOp:
                report.check(f"tensor all_reduce {name} {op.name}", lambda n=name, o=op: self.all_reduce(n, o))
            report.check(f"tensor broadcast/reduce/reduce_scatter/all_gather/p2p {name}",
                         lambda n=name: self.collectives(n))
        report.check("tensor collectives went through the nccl backend", self.backend_used)


# -- timing ----------------------------------------------------------------------------------------------
def per_call_us(fn, sync, iters: int) -> float:
    """Median over 3 rounds of the time per call, `iters` calls then one synchronize."""
    for _ in range(3):
        fn()
    sync()
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        rounds.append((time.perf_counter() - start) / iters * 1e6)
    return sorted(rounds)[1]


def time_size(direct: Direct, tensors: Tensors | None, nbytes: int) -> str:
    """One row of the table: all_reduce of `nbytes` through each path, on the same communicator."""
    cupy, comm, stream = direct.cupy, direct.comm, direct.stream
    nccl = cupy.cuda.nccl
    f32, SUM = direct.dtype_of("float32"), direct.ReduceOp.SUM
    n = nbytes // 4
    buf = cupy.ones(n, cupy.float32)
    ptr = buf.data.ptr
    iters = 200 if nbytes <= 1 << 20 else 50
    raw = per_call_us(lambda: comm.nccl.allReduce(ptr, ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr),
                      stream.synchronize, iters)
    ours = per_call_us(lambda: direct.backend.all_reduce(buf, buf, n, f32, SUM, comm, stream), stream.synchronize,
                       iters)
    row = f"{nbytes:>10} {raw:>10.2f} {ours:>12.2f} {ours - raw:>9.2f}"
    if tensors is not None:
        t = tensors.tensor(np.ones(n, np.float32))
        row += f" {per_call_us(lambda: tensors.dist.all_reduce(t), cupy.cuda.Device().synchronize, iters):>16.2f}"
    return row


def timing_table(direct: Direct, tensors: Tensors | None) -> None:
    gc.collect()        # the checks left garbage; a collection inside a timed round would skew it
    print("\nall_reduce float32 SUM in place, one rank (us per call; NCCL moves no data with one rank)")
    head = f"{'bytes':>10} {'raw nccl':>10} {'NCCLBackend':>12} {'overhead':>9}"
    print(head + (f" {'dist.all_reduce':>16}" if tensors else ""))
    for nbytes in SIZES:
        print(time_size(direct, tensors, nbytes), flush=True)


def describe() -> None:
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    version = cupy.cuda.nccl.get_version()
    print(f"cupy {cupy.__version__}, NCCL {version // 10000}.{version // 100 % 100}.{version % 100}, "
          f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, device 0: {name} "
          f"(sm_{props['major']}{props['minor']})", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("auto", "direct", "tensor"), default="auto",
                        help="auto: direct, then tensor mode where GPU tensors exist (default)")
    parser.add_argument("--count", type=int, default=100003, help="elements per checked buffer (default 100003)")
    parser.add_argument("--timeout", type=float, default=110, help="abort (exit 1) after this many seconds")
    parser.add_argument("--no-timing", action="store_true", help="skip the all_reduce timing table")
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(args.timeout, exit=True)    # a hung NCCL call must not hang the job

    report, direct, tensors = Report(), None, None
    started = time.perf_counter()
    try:
        describe()
    except Exception as exc:
        print(f"FAIL  cupy/NCCL/GPU not usable: {type(exc).__name__}: {exc}\nNCCL CHECK: FAIL")
        return 1

    def start_direct():
        nonlocal direct
        direct = Direct(args.count)

    def start_tensors():
        nonlocal tensors
        tensors = Tensors(args.count, required=args.mode == "tensor")

    if report.check("direct: NCCLBackend available, unique id, comm_init_rank(1, id, 0)", start_direct):
        direct.run(report)
    if args.mode in ("auto", "tensor") and report.check("tensor: init_parallel_env() and GPU tensors",
                                                       start_tensors):
        tensors.run(report)
    if direct is not None and not args.no_timing:
        report.check("timing table", lambda: timing_table(direct, tensors))
    if direct is not None:
        report.check("direct comm_destroy", direct.close)

    failed = report.count("FAIL")
    print(f"\n{report.count('PASS')} passed, {failed} failed, {report.count('SKIP')} skipped "
          f"in {time.perf_counter() - started:.1f} s")
    for name, status, detail in report.results:
        if status == "FAIL":
            print(f"  FAIL {name}: {detail}")
    print("NCCL CHECK: " + ("FAIL" if failed else "PASS"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
