"""Every collective of oarlock.distributed checked against numpy, run by each rank of an MPI job.

Each rank computes every rank's input locally (inputs are a function of the
rank), so the expected result of each collective is plain numpy over those
inputs, in float64 where it matters. Integer-valued data keeps sums and
products exact in bfloat16, float16 and int8, so most comparisons are exact.
Results travel to rank 0 through raw mpi4py (not through the code under test),
which writes {check name: [failure messages]} as JSON to argv[1].

test_collectives.py imports this module to list the checks (CHECKS) and runs it
under `oarlock launch` and plain `mpiexec` with 2 and 4 ranks, and as a single
process.
"""

from __future__ import annotations

import json
import sys
import traceback

import ml_dtypes
import numpy as np

CHECKS: dict = {}

DTYPES = ["float32", "float64", "bfloat16", "float16", "int8", "uint8", "int32", "int64", "bool", "complex64"]
MOVE_ONLY_DTYPES = ["float8_e4m3fn", "int16", "complex128"]
SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]
OPS = ["SUM", "MAX", "MIN", "PROD", "AVG"]


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if name in ("bfloat16", "float8_e4m3fn") else np.dtype(name)


def data(rank: int, shape, dtype: str, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s input: small integers (exact in every dtype), reproducible on every rank."""
    rng = np.random.default_rng(1000 * salt + rank)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    low, high = (0, 4) if dtype == "uint8" else (-3, 4)
    values = rng.integers(low, high, size=shape)
    if dtype.startswith("complex"):
        return (values + 1j * rng.integers(low, high, size=shape)).astype(dtype)
    return values.astype(np_dtype(dtype))


def reduce_expected(arrays, op: str, dtype: str) -> np.ndarray:
    """The reduction computed in float64 (complex128) and cast once, as the exact answer."""
    if dtype == "bool":
        stacked = np.stack(arrays)
        return stacked.any(0) if op in ("SUM", "MAX") else stacked.all(0)
    wide = np.stack([a.astype(np.complex128 if dtype.startswith("complex") else np.float64) for a in arrays])
    result = {"SUM": wide.sum(0), "MAX": wide.max(0) if wide.size else wide.sum(0),
              "MIN": wide.min(0) if wide.size else wide.sum(0), "PROD": wide.prod(0),
              "AVG": wide.sum(0) / len(arrays)}[op]
    if op == "AVG" and np_dtype(dtype).kind in "iu":
        result = np.trunc(result)
    return result.astype(np_dtype(dtype))


def same(got: np.ndarray, expected: np.ndarray, what: str, rtol: float = 0.0):
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, expected {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    if rtol:
        ok = np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=rtol)
    else:
        ok = np.array_equal(got, expected)
    assert ok, f"{what}: got {got.ravel()[:8]}, expected {expected.ravel()[:8]}"


def raises(fn, *fragments):
    try:
        fn()
    except (ValueError, TypeError) as exc:
        for fragment in fragments:
            assert fragment in str(exc), f"error {exc!r} does not mention {fragment!r}"
        return
    raise AssertionError(f"expected an error mentioning {fragments}")


class Context:
    def __init__(self, paddle, dist):
        self.paddle, self.dist = paddle, dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def tensor(self, array):
        return self.paddle.to_tensor(array)

    def inputs(self, shape, dtype, salt=0):
        return [data(r, shape, dtype, salt) for r in range(self.size)]


# -- all_reduce, reduce, broadcast ------------------------------------------------------------
@check
def all_reduce_every_dtype_op_shape(ctx):
    for dtype in DTYPES:
        for op in OPS:
            for shape in SHAPES:
                if (dtype == "bool" and op == "AVG") or (dtype.startswith("complex") and op in ("MAX", "MIN")):
                    continue
                arrays = ctx.inputs(shape, dtype, salt=len(shape))
                x = ctx.tensor(arrays[ctx.rank])
                ctx.dist.all_reduce(x, op=getattr(ctx.dist.ReduceOp, op))
                expected = reduce_expected(arrays, op, dtype)
                # AVG divides a rounded sum: one rounding more than the exact answer in low precision
                rtol = 1e-2 if op == "AVG" and dtype in ("bfloat16", "float16") else 0.0
                same(x.numpy(), expected, f"all_reduce {dtype} {op} {shape}", rtol)


@check
def all_reduce_real_valued_float32(ctx):
    arrays = [np.random.default_rng(r).standard_normal((257, 33)).astype(np.float32) for r in range(ctx.size)]
    x = ctx.tensor(arrays[ctx.rank])
    ctx.dist.all_reduce(x)
    same(x.numpy(), np.sum(np.stack(arrays).astype(np.float64), 0).astype(np.float32), "float32 sum", 1e-6)


@check
def all_reduce_rejects_undefined_ops(ctx):
    raises(lambda: ctx.dist.all_reduce(ctx.tensor(np.ones(3, bool)), op=ctx.dist.ReduceOp.AVG),
           "all_reduce", "AVG", "bool")
    raises(lambda: ctx.dist.all_reduce(ctx.tensor(np.ones(3, np.complex64)), op=ctx.dist.ReduceOp.MAX),
           "all_reduce", "MAX", "complex64")
    raises(lambda: ctx.dist.all_reduce(ctx.tensor(np.ones(3)), op=7), "all_reduce", "op", "7")
    raises(lambda: ctx.dist.all_reduce(np.ones(3)), "all_reduce", "tensor", "ndarray")
    ctx.dist.barrier()   # the failed calls must not have left anything in flight


@check
def all_reduce_non_contiguous_tensor(ctx):
    arrays = ctx.inputs((4, 6), "float32", salt=7)
    x = ctx.tensor(arrays[ctx.rank]).transpose([1, 0])
    ctx.dist.all_reduce(x)
    same(x.numpy(), reduce_expected(arrays, "SUM", "float32").T, "transposed all_reduce")


@check
def broadcast_from_every_rank(ctx):
    for src in range(ctx.size):
        for dtype in DTYPES + MOVE_ONLY_DTYPES:
            for shape in [(), (0,), (3, 5)]:
                arrays = ctx.inputs(shape, dtype, salt=src)
                x = ctx.tensor(arrays[ctx.rank])
                ctx.dist.broadcast(x, src=src)
                same(x.numpy(), arrays[src], f"broadcast {dtype} {shape} from {src}")


@check
def reduce_to_every_rank(ctx):
    for dst in range(ctx.size):
        for dtype, op in [("float32", "SUM"), ("int64", "MAX"), ("bfloat16", "SUM"), ("float64", "AVG"),
                          ("int32", "PROD"), ("bool", "MIN")]:
            arrays = ctx.inputs((2, 3), dtype, salt=dst)
            x = ctx.tensor(arrays[ctx.rank])
            ctx.dist.reduce(x, dst=dst, op=getattr(ctx.dist.ReduceOp, op))
            expected = reduce_expected(arrays, op, dtype) if ctx.rank == dst else arrays[ctx.rank]
            same(x.numpy(), expected, f"reduce {dtype} {op} to {dst}")


# -- gathers and scatters --------------------------------------------------------------------------
@check
def all_gather_list_and_tensor_forms(ctx):
    for dtype in DTYPES + MOVE_ONLY_DTYPES:
        for shape in [(), (0,), (4,), (2, 3)]:
            arrays = ctx.inputs(shape, dtype, salt=3)
            out = []
            ctx.dist.all_gather(out, ctx.tensor(arrays[ctx.rank]))
            assert len(out) == ctx.size, f"all_gather filled {len(out)} tensors"
            for r, t in enumerate(out):
                same(t.numpy(), arrays[r], f"all_gather {dtype} {shape} piece {r}")
            given = [ctx.tensor(np.zeros(shape, np_dtype(dtype))) for _ in range(ctx.size)]
            ctx.dist.all_gather(given, ctx.tensor(arrays[ctx.rank]))
            for r, t in enumerate(given):
                same(t.numpy(), arrays[r], f"all_gather into given list {dtype} {shape} piece {r}")
            if shape:
                whole = ctx.tensor(np.zeros((ctx.size * shape[0], *shape[1:]), np_dtype(dtype)))
                ctx.dist.all_gather(whole, ctx.tensor(arrays[ctx.rank]))
                same(whole.numpy(), np.concatenate(arrays), f"all_gather tensor form {dtype} {shape}")


@check
def finished_gathers_free_their_buffers_at_once(ctx):
    """A finished all_gather (sync or async) leaves nothing for the cyclic garbage collector: dropping the
    gathered tensors returns their memory at once (a task that kept its call's closures kept every receive
    buffer alive until the next gc, which stage-3 sharding's gathered weights made 20 MB of garbage)."""
    import gc
    memory = ctx.paddle.device.memory_allocated
    x = ctx.tensor(np.ones((256, 256), np.float32))
    gc.collect()
    gc.disable()
    try:
        before = memory("cpu")
        for sync_op in (True, False):
            out = []
            task = ctx.dist.all_gather(out, x, sync_op=sync_op)
            if not sync_op:
                task.wait()
            del out, task
        left = memory("cpu") - before
    finally:
        gc.enable()
    assert left < x.size * 4, f"{left} bytes still held after the gathered tensors were dropped (gc disabled)"


@check
def reduce_scatter_list_and_tensor_forms(ctx):
    for dtype, op in [("float32", "SUM"), ("bfloat16", "SUM"), ("int64", "MAX"), ("float64", "AVG"),
                      ("int8", "MIN"), ("float16", "PROD")]:
        blocks = [[data(r, (3, 2), dtype, salt=10 + b) for b in range(ctx.size)] for r in range(ctx.size)]
        out = ctx.tensor(np.zeros((3, 2), np_dtype(dtype)))
        ctx.dist.reduce_scatter(out, [ctx.tensor(b) for b in blocks[ctx.rank]], op=getattr(ctx.dist.ReduceOp, op))
        expected = reduce_expected([blocks[r][ctx.rank] for r in range(ctx.size)], op, dtype)
        same(out.numpy(), expected, f"reduce_scatter list {dtype} {op}")
        out2 = ctx.tensor(np.zeros((3, 2), np_dtype(dtype)))
        ctx.dist.reduce_scatter(out2, ctx.tensor(np.concatenate(blocks[ctx.rank])), op=getattr(ctx.dist.ReduceOp, op))
        same(out2.numpy(), expected, f"reduce_scatter tensor form {dtype} {op}")


@check
def alltoall_even_and_uneven(ctx):
    n = ctx.size
    sent = [[data(r, (2, 3), "float32", salt=100 + p) for p in range(n)] for r in range(n)]
    out = []
    ctx.dist.alltoall(out, [ctx.tensor(a) for a in sent[ctx.rank]])
    for p in range(n):
        same(out[p].numpy(), sent[p][ctx.rank], f"alltoall even piece from {p}")
    # uneven: rank r sends (r + p + 1) rows of width 2 to peer p
    uneven = [[data(r, (r + p + 1, 2), "bfloat16", salt=200 + p) for p in range(n)] for r in range(n)]
    outs = [ctx.tensor(np.zeros((p + ctx.rank + 1, 2), ml_dtypes.bfloat16)) for p in range(n)]
    ctx.dist.alltoall(outs, [ctx.tensor(a) for a in uneven[ctx.rank]])
    for p in range(n):
        same(outs[p].numpy(), uneven[p][ctx.rank], f"alltoall uneven piece from {p}")


@check
def alltoall_single_even_and_uneven(ctx):
    n = ctx.size
    rows = [data(r, (2 * n, 3), "int64", salt=300) for r in range(n)]
    out = ctx.tensor(np.zeros((2 * n, 3), np.int64))
    ctx.dist.alltoall_single(out, ctx.tensor(rows[ctx.rank]))
    expected = np.concatenate([rows[p][2 * ctx.rank:2 * ctx.rank + 2] for p in range(n)])
    same(out.numpy(), expected, "alltoall_single even")
    # rank r sends (r + p) rows (possibly zero) to peer p
    sizes = [[r + p for p in range(n)] for r in range(n)]
    inputs = [data(r, (sum(sizes[r]), 2), "float32", salt=400) for r in range(n)]
    recv_sizes = [sizes[p][ctx.rank] for p in range(n)]
    out = ctx.tensor(np.zeros((sum(recv_sizes), 2), np.float32))
    ctx.dist.alltoall_single(out, ctx.tensor(inputs[ctx.rank]), in_split_sizes=sizes[ctx.rank],
                             out_split_sizes=recv_sizes)
    pieces = []
    for p in range(n):
        start = sum(sizes[p][:ctx.rank])
        pieces.append(inputs[p][start:start + sizes[p][ctx.rank]])
    same(out.numpy(), np.concatenate(pieces), "alltoall_single uneven")
    bad = ctx.tensor(np.zeros((2 * n + 1, 3), np.int64))
    raises(lambda: ctx.dist.alltoall_single(bad, bad, in_split_sizes=[1] * n), "alltoall_single", "in_split_sizes")
    ctx.dist.barrier()


@check
def scatter_and_gather_every_root(ctx):
    n = ctx.size
    for root in range(n):
        pieces = [data(p, (2, 2), "float64", salt=500 + root) for p in range(n)]
        out = ctx.tensor(np.zeros((2, 2)))
        ctx.dist.scatter(out, [ctx.tensor(a) for a in pieces] if ctx.rank == root else None, src=root)
        same(out.numpy(), pieces[ctx.rank], f"scatter from {root}")
        mine = data(ctx.rank, (3,), "int32", salt=600 + root)
        gathered = [] if ctx.rank == root else None
        ctx.dist.gather(ctx.tensor(mine), gathered, dst=root)
        if ctx.rank == root:
            for p in range(n):
                same(gathered[p].numpy(), data(p, (3,), "int32", salt=600 + root), f"gather to {root} from {p}")


# -- point to point ------------------------------------------------------------------------------------
@check
def send_recv_ring(ctx):
    n, r = ctx.size, ctx.rank
    if n == 1:
        return
    mine = data(r, (4,), "bfloat16", salt=700)
    got = ctx.tensor(np.zeros(4, ml_dtypes.bfloat16))
    right, left = (r + 1) % n, (r - 1) % n
    if r % 2 == 0:
        ctx.dist.send(ctx.tensor(mine), dst=right)
        ctx.dist.recv(got, src=left)
    else:
        ctx.dist.recv(got, src=left)
        ctx.dist.send(ctx.tensor(mine), dst=right)
    same(got.numpy(), data(left, (4,), "bfloat16", salt=700), "ring send/recv")
    task_recv = ctx.dist.irecv(got, src=left)
    task_send = ctx.dist.isend(ctx.tensor(mine * 2), dst=right)
    task_send.wait()
    task_recv.wait()
    same(got.numpy(), data(left, (4,), "bfloat16", salt=700) * 2, "isend/irecv")


@check
def batch_isend_irecv_exchange(ctx):
    n, r = ctx.size, ctx.rank
    outs = [ctx.tensor(np.zeros(3, np.float32)) for _ in range(n)]
    ops = []
    for p in range(n):
        ops.append(ctx.dist.P2POp(ctx.dist.isend, ctx.tensor(data(r, (3,), "float32", salt=800 + p)), p))
        ops.append(ctx.dist.P2POp(ctx.dist.irecv, outs[p], p))
    for task in ctx.dist.batch_isend_irecv(ops):
        task.wait()
    for p in range(n):
        same(outs[p].numpy(), data(p, (3,), "float32", salt=800 + r), f"batch exchange from {p}")


# -- groups, async, objects ---------------------------------------------------------------------------
@check
def subgroups(ctx):
    n, r = ctx.size, ctx.rank
    evens, odds = list(range(0, n, 2)), list(range(1, n, 2))[::-1]   # odd ranks in reverse order
    g_even = ctx.dist.new_group(evens)
    g_odd = ctx.dist.new_group(odds) if odds else None
    mine = g_even if r in evens else g_odd
    members = evens if r in evens else odds
    assert ctx.dist.get_rank(mine) == members.index(r), "group rank"
    assert ctx.dist.get_world_size(mine) == len(members), "group size"
    other = g_odd if r in evens else g_even
    if other is not None:
        assert other.rank == -1 and not other.is_member(), "non-member rank must be -1"
        assert ctx.dist.all_reduce(ctx.tensor(np.ones(2)), group=other) is None, "non-member call returns None"
    arrays = ctx.inputs((5,), "int64", salt=900)
    x = ctx.tensor(arrays[r])
    ctx.dist.all_reduce(x, group=mine)
    same(x.numpy(), reduce_expected([arrays[m] for m in members], "SUM", "int64"), "subgroup all_reduce")
    y = ctx.tensor(arrays[r])
    ctx.dist.broadcast(y, src=members[-1], group=mine)     # src is a global rank
    same(y.numpy(), arrays[members[-1]], "subgroup broadcast from a global rank")
    gathered = []
    ctx.dist.all_gather(gathered, ctx.tensor(arrays[r]), group=mine)
    same(np.stack([t.numpy() for t in gathered]), np.stack([arrays[m] for m in members]), "subgroup all_gather")
    if n > 1:
        raises(lambda: ctx.dist.broadcast(ctx.tensor(np.ones(1)), src=[m for m in range(n) if m not in members][0],
                                          group=mine), "broadcast", "src", "not a member")
    raises(lambda: ctx.dist.new_group([0, n]), "new_group", str(n))
    ctx.dist.barrier()


@check
def async_tasks(ctx):
    arrays = [ctx.inputs((1000,), "float32", salt=1000 + i) for i in range(3)]
    xs = [ctx.tensor(a[ctx.rank]) for a in arrays]
    tasks = [ctx.dist.all_reduce(x, sync_op=False) for x in xs]
    gathered = []
    tasks.append(ctx.dist.all_gather(gathered, ctx.tensor(arrays[0][ctx.rank]), sync_op=False))
    for task in reversed(tasks):
        task.wait()
        assert task.is_completed(), "a waited task is completed"
    for x, a in zip(xs, arrays):
        same(x.numpy(), reduce_expected(a, "SUM", "float32"), "async all_reduce")
    assert len(gathered) == ctx.size, "async all_gather fills its list on wait"
    task = ctx.dist.broadcast(xs[0], src=0, sync_op=False)
    while not task.is_completed():
        pass
    same(xs[0].numpy(), reduce_expected(arrays[0], "SUM", "float32"), "polled broadcast")


@check
def object_collectives(ctx):
    n, r = ctx.size, ctx.rank
    mine = {"rank": r, "text": "x" * (1000 * r), "tuple": (r, [r] * r), "array": np.arange(r)}
    got = []
    ctx.dist.all_gather_object(got, mine)
    assert [g["rank"] for g in got] == list(range(n)) and all(len(g["text"]) == 1000 * g["rank"] for g in got)
    assert all(np.array_equal(g["array"], np.arange(g["rank"])) for g in got), "arrays survive pickling"
    for src in range(n):
        objects = [{"from": src}, "s" * src, None] if r == src else [None]
        ctx.dist.broadcast_object_list(objects, src=src)
        assert objects == [{"from": src}, "s" * src, None], f"broadcast_object_list from {src}: {objects}"
    out = []
    ctx.dist.scatter_object_list(out, [f"to {p}" for p in range(n)] if r == n - 1 else None, src=n - 1)
    assert out == [f"to {r}"], f"scatter_object_list: {out}"


@check
def errors_name_the_argument(ctx):
    n = ctx.size
    x = ctx.tensor(np.zeros(3, np.float32))
    raises(lambda: ctx.dist.all_gather([x] * (n + 1), x), "all_gather", "tensor_list", str(n + 1))
    raises(lambda: ctx.dist.reduce_scatter(x, [ctx.tensor(np.zeros(3, np.int32))] * n), "reduce_scatter",
           "tensor_list[0]", "int32")
    raises(lambda: ctx.dist.all_gather(ctx.tensor(np.zeros(3 * n + 1, np.float32)), x), "all_gather",
           "tensor_list", f"[{3 * n}]")
    raises(lambda: ctx.dist.reduce_scatter(x, ctx.tensor(np.zeros(3 * n, np.int32))), "reduce_scatter",
           "tensor_list", "int32")
    raises(lambda: ctx.dist.broadcast(x, src=n), "broadcast", "src")
    raises(lambda: ctx.dist.all_reduce(x, group="world"), "all_reduce", "group")
    ctx.dist.barrier()


def main(out_path: str) -> int:
    import oarlock as paddle
    import oarlock.distributed as dist
    from mpi4py import MPI

    dist.init_parallel_env()
    ctx = Context(paddle, dist)
    failures = {}
    for name, fn in CHECKS.items():
        try:
            fn(ctx)
        except Exception as exc:   # recorded, reported by the pytest side
            failures[name] = [f"rank {ctx.rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"]
    everything = MPI.COMM_WORLD.gather(failures, root=0)
    if ctx.rank == 0:
        merged = {name: [] for name in CHECKS}
        for rank_failures in everything:
            for name, messages in rank_failures.items():
                merged[name].extend(messages)
        with open(out_path, "w") as f:
            json.dump({"size": ctx.size, "failures": merged}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
