"""Checkpoint throughput: FlexCheckpoint save/load of a ~1 GB sharded state dict against the safetensors library.

Measured, on each world size of --ranks (default 1 and 4) on one host (more ranks than cores are
oversubscribed), for a state dict of about --gb GB (1 GB = 1e9 bytes) shaped like a small
transformer: float32 embedding and attention weights, bfloat16 MLP weights, float32 norm vectors.
Every tensor is sharded along axis 0 over the ranks as dist.shard_full_weight cuts it (rank r
holds rows [r*n/N, (r+1)*n/N)), but each rank draws only its own rows (seeded numpy) and builds
its dist.ShardedWeight directly.
Per repeat, every rank, in this order:

- reference save: `safetensors.numpy.save_file` of this rank's arrays to its own file. The
  library does not fsync, so this is a write into the page cache;
- reference save + fsync: the same, then os.fsync of the file (what durability costs; oarlock
  also fsyncs its directory and writes a small metadata file, which this reference does not);
- oarlock sync save: `dist.save_state_dict(sd, dir, unique_id=repeat)`: temporary name, XXH3-64
  per tensor, fsync, rename, then the coordinator's metadata and a final barrier;
- the same with OARLOCK_CHECKPOINT_FSYNC=0 (no fsync, like the library's save_file: shown for
  information, it is the like-for-like comparison of everything but durability);
- oarlock async save, in each OARLOCK_ASYNC_SAVE mode (cow: copy-on-write write guards, the
  default; cow+copier: the same with OARLOCK_ASYNC_SAVE_PRECOPY=1, a thread copying ahead; copy:
  everything copied before returning; fork: a forked writer): `save_state_dict(...,
  async_save=True)`; "blocked" is the time until it returns (what a training loop waits for). The
  saved tensors are trainable (they stand for a model's parameters), and a stand-in training step
  runs through oarlock right after the call, while the writer works ("step during save"): a compute
  phase standing for forward and backward (each tensor is read by a reduction and copied into its
  gradient buffer with copy_) and then an optimizer update of every tensor (oarlock.sgd_step_, the
  fused in-place op SGD runs, under no_grad). The save is waited for ("total" = call to
  wait_async_save() returning) and the same step runs again with nothing pending ("step alone").
  The worst case follows: another async save, and the update alone right after the call returns,
  before the writer got anywhere ("update right after save"), against the update with nothing
  pending. "blocked + step penalty" charges the slowdown of the step to the async save too, the
  honest time the training loop loses;
- reference load: `safetensors.numpy.load_file` of this rank's reference file (into new arrays);
- reference load + copy: load_file, then np.copyto into the preallocated arrays oarlock loads into
  (what filling a model's existing tensors from load_file costs; shown for information);
- oarlock load: `dist.load_state_dict` into preallocated tensors of the same layout (zeroed
  first, untimed), so each rank reads its own file and nothing moves between ranks. The first
  repeat checks that both loads return the saved bytes.

Timing: every timed region starts after a barrier (oarlock's, which yields the core when ranks are
oversubscribed) and its time is the maximum over ranks (a checkpoint is done when its slowest
rank is). Between regions, untimed, every rank calls os.sync() so that one region's writeback
is not billed to the next. Throughput is the whole state dict's bytes (all ranks) / time, in
GB/s; figures are medians over --repeats. Loads read files the same repeat has just written, so
they come from the page cache for the reference and oarlock alike (dropping the cache needs root;
--cold instead evicts the files with posix_fadvise(DONTNEED) before each load, which the kernel
may honour only in part). Checkpoint files are deleted after every repeat.

Goals (from the issue): oarlock's sync save and its load at least 0.8x the reference's
throughput (the reference being the library's plain save_file, without fsync: the issue's "the
safetensors library directly"), the async save's blocked time under 10% of the sync save's, and
the training step during an async save no more than 10% slower than alone.

Run without MPI, the script is a driver: it launches itself under `mpiexec -n N` for each N of
--ranks (setting OARLOCK_BENCH_RANK_MODE=1 so the copies know they are ranks), shows rank 0's
progress on stderr and prints one table for all rank counts.

    python bench/checkpoint.py [--ranks 1,4] [--gb 1] [--repeats 5] [--dir /tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

# bench/ is sys.path[0] when this script runs
from _mpi_driver import find_launcher, main as entry, mpi_library, run_ranks, save_json, write_result

RUN_DIR_ENV = "OARLOCK_BENCH_CHECKPOINT_DIR"  # the directory one launch writes its files into
GOAL_RATIO = 0.8
GOAL_ASYNC = 0.10
LOAD_WARNING = 3.0
GOAL_STEP = 0.10
# bench name -> environment: copy-on-write guards (+ copier), staged copy + writer thread, forked writer
ASYNC_MODES = {"cow": {"OARLOCK_ASYNC_SAVE": "cow"},
               "cow+copier": {"OARLOCK_ASYNC_SAVE": "cow", "OARLOCK_ASYNC_SAVE_PRECOPY": "1"},
               "copy": {"OARLOCK_ASYNC_SAVE": "copy"},
               "fork": {"OARLOCK_ASYNC_SAVE": "fork"}}
OPS = ("ref_save", "ref_save_fsync", "sync_save", "sync_save_nofsync",
       *(f"{what}_{mode}" for mode in ASYNC_MODES for what in ("async_blocked", "step_pending", "async_total",
                                                                 "step_plain", "update_pending", "update_plain")),
       "ref_load", "ref_load_copy", "load")


def parse_ranks(text: str) -> list:
    try:
        ranks = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of rank counts: {text!r} (example: 1,4)") from None
    if not ranks or min(ranks) < 1:
        raise argparse.ArgumentTypeError(f"rank counts must be >= 1, got {text!r}")
    return ranks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Without OARLOCK_BENCH_RANK_MODE=1 in the environment the script launches itself with "
               "`mpiexec -n N` for each N of --ranks and prints one table at the end; with it (set by that "
               "driver) it is one rank of the benchmark, writes into the directory the driver names in "
               f"{RUN_DIR_ENV} and ignores --ranks, --dir, --json, --mpiexec and --timeout.")
    parser.add_argument("--ranks", type=parse_ranks, default=[1, 4], metavar="N[,N...]",
                        help="world sizes to run, one mpiexec launch each (default: 1,4)")
    parser.add_argument("--gb", type=float, default=1.0,
                        help="size of the whole state dict in GB (1e9 bytes), summed over ranks; the model's "
                             "shapes are chosen to come close (default 1)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed repeats of every operation; medians are reported (default 5)")
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="where to write: a fresh subdirectory is made here and removed at the end "
                             f"(default {tempfile.gettempdir()})")
    parser.add_argument("--cold", action="store_true",
                        help="before each load, evict the files it reads from the page cache with "
                             "posix_fadvise(DONTNEED) (after os.sync), so reads go to the disk as far as the kernel "
                             "allows (default: loads read from the page cache)")
    parser.add_argument("--json", metavar="PATH", help="also write every repeat's figures to this JSON file")
    parser.add_argument("--mpiexec", default="mpiexec", help="the launcher to use (default: mpiexec on PATH)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds one world size may take before its mpiexec is killed (default 900)")
    return parser


def settle(args) -> argparse.Namespace:
    if args.repeats < 1 or args.gb <= 0:
        raise SystemExit("checkpoint.py: --repeats must be >= 1 and --gb > 0")
    return args


# -- the state dict ------------------------------------------------------------------------------------------------
def _layer_bytes(hidden: int) -> int:
    # qkv [H, 3H] and o [H, H] in float32, up [H, 4H] and down [4H, H] in bfloat16, a bfloat16 bias [4H]
    # and two float32 norm vectors [H]
    return 4 * (3 + 1) * hidden * hidden + 2 * (4 + 4) * hidden * hidden + 2 * 4 * hidden + 2 * 4 * hidden


def model_spec(total_bytes: float) -> list:
    """[(key, global shape, dtype name)]: a transformer-like state dict of about total_bytes."""
    hidden = 2048
    while hidden > 64 and 2 * _layer_bytes(hidden) > 0.7 * total_bytes:
        hidden //= 2
    layers = max(1, int(0.7 * total_bytes // _layer_bytes(hidden)))
    spec = []
    for i in range(layers):
        p = f"layers.{i}."
        spec += [(p + "self_attn.qkv_proj.weight", (hidden, 3 * hidden), "float32"),
                 (p + "self_attn.o_proj.weight", (hidden, hidden), "float32"),
                 (p + "mlp.up_proj.weight", (hidden, 4 * hidden), "bfloat16"),
                 (p + "mlp.up_proj.bias", (4 * hidden,), "bfloat16"),
                 (p + "mlp.down_proj.weight", (4 * hidden, hidden), "bfloat16"),
                 (p + "input_layernorm.weight", (hidden,), "float32"),
                 (p + "post_attention_layernorm.weight", (hidden,), "float32")]
    spec.append(("norm.weight", (hidden,), "float32"))
    used = sum(nbytes(shape, dtype) for _, shape, dtype in spec)
    vocab = max(64, int((total_bytes - used) // (4 * hidden)) // 64 * 64)
    return [("embed_tokens.weight", (vocab, hidden), "float32")] + spec


def nbytes(shape, dtype: str) -> int:
    return int(np.prod(shape)) * (2 if dtype == "bfloat16" else 4)


def rows_of(n: int, rank: int, nranks: int) -> tuple:
    """Rows [start, stop) of axis 0 that rank `rank` holds, as shard_full_weight cuts them."""
    return rank * n // nranks, (rank + 1) * n // nranks


def make_local(spec: list, rank: int, nranks: int) -> dict:
    """{key: (oarlock Tensor of this rank's rows, global shape, global offset)}, drawn from numpy seeded by
    (tensor index, first row), so only this rank's part of the state dict is ever made here."""
    import ml_dtypes

    import oarlock

    out = {}
    for index, (key, shape, dtype) in enumerate(spec):
        start, stop = rows_of(shape[0], rank, nranks)
        local_shape = (stop - start, *shape[1:])
        rng = np.random.default_rng([index, start])
        values = rng.standard_normal(local_shape, dtype=np.float32) * np.float32(0.02)
        if dtype == "bfloat16":
            values = values.astype(ml_dtypes.bfloat16)
        # trainable, as a model's parameters are (an async save treats other tensors as optimizer state)
        out[key] = (oarlock.to_tensor(values, stop_gradient=False), tuple(shape), (start,) + (0,) * (len(shape) - 1))
    return out


# -- one rank ------------------------------------------------------------------------------------------------------
def run_rank(args) -> None:
    import safetensors.numpy as stnp

    import oarlock
    import oarlock.distributed as dist

    dist.init_parallel_env()
    from mpi4py import MPI  # already initialized by the plugin; the same library and process

    comm = MPI.COMM_WORLD.Dup()
    rank, nranks = dist.get_rank(), dist.get_world_size()
    run_dir = os.environ[RUN_DIR_ENV]
    sync_dir, async_dir = os.path.join(run_dir, "sync"), os.path.join(run_dir, "async")
    nofsync_dir = os.path.join(run_dir, "nofsync")
    ref_file = os.path.join(run_dir, f"ref_{rank}.safetensors")
    ref_fsync_file = os.path.join(run_dir, f"ref_fsync_{rank}.safetensors")

    def progress(text: str) -> None:
        if rank == 0:
            print(f"[{nranks} rank{'s' if nranks > 1 else ''}] {text}", file=sys.stderr, flush=True)

    progress("building the state dict")
    spec = model_spec(args.gb * 1e9)
    local = make_local(spec, rank, nranks)
    state = {key: dist.ShardedWeight(key, t, tuple(t.shape), shape, offset)
             for key, (t, shape, offset) in local.items()}
    arrays = {key: np.asarray(t) for key, (t, _, _) in local.items()}   # the same memory as the tensors
    targets = {key: oarlock.zeros(list(t.shape), dtype=spec_dtype) for (key, (t, _, _)), (_, _, spec_dtype)
               in zip(local.items(), spec)}
    target_state = {key: dist.ShardedWeight(key, targets[key], tuple(t.shape), shape, offset)
                    for key, (t, shape, offset) in local.items()}
    total = sum(nbytes(shape, dtype) for _, shape, dtype in spec)
    step = StandInStep([t for t, _, _ in local.values()])

    def barrier() -> None:
        dist.barrier()

    def timed(fn) -> float:
        barrier()
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def quiet() -> None:
        """Untimed: write back every dirty page, so the next region starts with an idle disk."""
        os.sync()
        barrier()

    def before_load() -> None:
        """With --cold: evict the files the next load reads (this rank's, and the metadata)."""
        if args.cold:
            evict([ref_file, *(os.path.join(sync_dir, name) for name in os.listdir(sync_dir)
                               if name.startswith(f"{rank}_") or name.endswith(".metadata"))])
            barrier()

    warm_up(stnp, dist, run_dir, rank)
    step()   # the gradient buffers' pages are touched here, not in a timed step
    quiet()
    times = np.zeros((len(OPS), args.repeats))
    ids = itertools.count()
    for repeat in range(args.repeats):
        progress(f"repeat {repeat + 1}/{args.repeats}")
        row = {}
        # the stand-in steps change the tensors; the first repeat checks the loads against these values
        expected = {key: a.copy() for key, a in arrays.items()} if repeat == 0 else None
        row["ref_save"] = timed(lambda: stnp.save_file(arrays, ref_file))
        quiet()
        row["ref_save_fsync"] = timed(lambda: fsynced_save(stnp, arrays, ref_fsync_file))
        quiet()
        row["sync_save"] = timed(lambda uid=repeat: dist.save_state_dict(state, sync_dir, unique_id=uid))
        quiet()
        os.environ["OARLOCK_CHECKPOINT_FSYNC"] = "0"
        row["sync_save_nofsync"] = timed(lambda uid=repeat: dist.save_state_dict(state, nofsync_dir, unique_id=uid))
        del os.environ["OARLOCK_CHECKPOINT_FSYNC"]
        quiet()
        for mode, env in ASYNC_MODES.items():
            os.environ.update(env)
            barrier()
            start = time.perf_counter()
            dist.save_state_dict(state, async_dir, unique_id=next(ids), async_save=True)
            row[f"async_blocked_{mode}"] = time.perf_counter() - start
            row[f"step_pending_{mode}"] = timed(step)   # right after the call, while the writer works
            dist.wait_async_save()
            row[f"async_total_{mode}"] = time.perf_counter() - start
            row[f"step_plain_{mode}"] = timed(step)     # nothing pending
            quiet()
            barrier()
            dist.save_state_dict(state, async_dir, unique_id=next(ids), async_save=True)
            row[f"update_pending_{mode}"] = timed(step.update)   # the worst case: the writer has barely begun
            dist.wait_async_save()
            row[f"update_plain_{mode}"] = timed(step.update)
            for name in env:
                del os.environ[name]
            quiet()
        before_load()
        loaded = {}
        row["ref_load"] = timed(lambda out=loaded: out.update(stnp.load_file(ref_file)))
        if repeat == 0:
            check_equal(expected, loaded, "safetensors.numpy.load_file", rank)
        loaded.clear()
        before_load()
        row["ref_load_copy"] = timed(lambda: copy_into(stnp.load_file(ref_file), targets))
        for target in targets.values():
            np.asarray(target)[...] = 0
        before_load()
        row["load"] = timed(lambda uid=repeat: dist.load_state_dict(target_state, sync_dir, unique_id=uid))
        if repeat == 0:
            check_equal(expected, {key: np.asarray(t) for key, t in targets.items()}, "dist.load_state_dict", rank)
            expected = None
        for i, op in enumerate(OPS):
            times[i, repeat] = row[op]
        # clean up: every rank its reference files, then rank 0 the checkpoint directories
        barrier()
        for name in (ref_file, ref_fsync_file):
            os.unlink(name)
        barrier()
        if rank == 0:
            for directory in (sync_dir, nofsync_dir, async_dir):
                shutil.rmtree(directory)
        quiet()

    worst = np.zeros_like(times) if rank == 0 else None
    comm.Reduce(times, worst, op=MPI.MAX, root=0)
    if rank == 0:
        result = {"ranks": nranks, "repeats": args.repeats, "cold": args.cold, "bytes": total,
                  "tensors": len(spec), "bytes_per_rank_max": max(
                      sum(nbytes((b - a, *shape[1:]), dtype) for (_, shape, dtype) in spec
                          for a, b in [rows_of(shape[0], r, nranks)]) for r in range(nranks)),
                  "seconds": {op: worst[i].tolist() for i, op in enumerate(OPS)}}
        write_result(result)
    comm.Free()


class StandInStep:
    """A training step through oarlock on the saved tensors (standing for the parameters): compute
    (forward and backward read every parameter; here a reduction of each, and its gradient written
    into a buffer kept between steps, as backward accumulates into .grad), then the optimizer's
    update of every parameter in place (sgd_step_: param -= lr * grad, the fused op SGD runs). An
    async save's write guards see the update, as they see a real optimizer's; its copy-on-write
    copies happen there."""

    def __init__(self, params: list):
        import oarlock

        self.params = params
        self.grads = [oarlock.zeros_like(p) for p in params]

    def __call__(self) -> None:
        self.compute()
        self.update()

    def compute(self) -> None:
        import oarlock

        with oarlock.no_grad():
            for p, g in zip(self.params, self.grads):
                p.sum()
                g.copy_(p)

    def update(self) -> None:
        import oarlock

        with oarlock.no_grad():
            for p, g in zip(self.params, self.grads):
                oarlock.sgd_step_(p, g, 1e-4)


def fsynced_save(stnp, arrays: dict, path: str) -> None:
    stnp.save_file(arrays, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def warm_up(stnp, dist, run_dir: str, rank: int) -> None:
    """One small untimed save and load of each kind, so imports and first-use set-up are paid for here."""
    import oarlock

    small = oarlock.to_tensor(np.ones((4, 4), np.float32))
    directory = os.path.join(run_dir, "warm_up")
    state = {"w": dist.ShardedWeight("w", small, (4, 4), (4 * dist.get_world_size(), 4), (4 * rank, 0))}
    dist.save_state_dict(state, directory, unique_id=0)
    dist.save_state_dict(state, directory, unique_id=1, async_save=True)
    dist.wait_async_save()
    dist.load_state_dict(state, directory, unique_id=0)
    ref = os.path.join(run_dir, f"warm_up_{rank}.safetensors")
    stnp.save_file({"w": np.asarray(small)}, ref)
    stnp.load_file(ref)
    os.unlink(ref)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(directory)


def copy_into(arrays: dict, targets: dict) -> None:
    for key, array in arrays.items():
        np.copyto(np.asarray(targets[key]), array)


def evict(paths: list) -> None:
    """Ask the kernel to drop these (clean, after os.sync) files' pages from the page cache."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def check_equal(expected: dict, got: dict, what: str, rank: int) -> None:
    for key, array in expected.items():
        other = got.get(key)
        if other is None or other.shape != array.shape or other.dtype != array.dtype or \
                not np.array_equal(other.view(np.uint8), array.view(np.uint8)):
            raise AssertionError(f"rank {rank}: {what} did not return the saved values of {key!r}")


# -- the table -----------------------------------------------------------------------------------------------------
def summarize(run: dict) -> dict:
    """Medians (ms) and throughputs (GB/s) of one launch's figures."""
    ms = {op: statistics.median(values) * 1e3 for op, values in run["seconds"].items()}
    gbs = {op: run["bytes"] / (value / 1e3) / 1e9 for op, value in ms.items()}
    return {"ms": ms, "gbs": gbs,
            "save_ratio": gbs["sync_save"] / gbs["ref_save"],
            "save_ratio_fsync": gbs["sync_save"] / gbs["ref_save_fsync"],
            "load_ratio": gbs["load"] / gbs["ref_load"],
            "load_ratio_copy": gbs["load"] / gbs["ref_load_copy"],
            "save_ratio_nofsync": gbs["sync_save_nofsync"] / gbs["ref_save"],
            **{f"async_fraction_{m}": ms[f"async_blocked_{m}"] / ms["sync_save"] for m in ASYNC_MODES},
            **{f"step_slowdown_{m}": ms[f"step_pending_{m}"] / ms[f"step_plain_{m}"] - 1 for m in ASYNC_MODES},
            **{f"update_slowdown_{m}": ms[f"update_pending_{m}"] / ms[f"update_plain_{m}"] - 1 for m in ASYNC_MODES},
            **{f"async_fraction_with_step_{m}": (ms[f"async_blocked_{m}"] + max(ms[f"step_pending_{m}"]
                                                                                 - ms[f"step_plain_{m}"], 0.0))
               / ms["sync_save"] for m in ASYNC_MODES}}


def render(runs: list, args) -> str:
    def yes(ok: bool) -> str:
        return "yes" if ok else "**NO**"

    lines = [f"### median of {args.repeats} repeats, wall time = max over ranks; GB/s = state dict bytes / time "
             "(1e9 bytes)", "",
             "| ranks | op | reference | ref ms | ref GB/s | oarlock | oarlock ms | oarlock GB/s | ratio | "
             f"goal (>= {GOAL_RATIO}) |",
             "|---:|---|---|---:|---:|---|---:|---:|---:|:---:|"]
    for run in runs:
        s, n = run["summary"], run["ranks"]
        ms, gbs = s["ms"], s["gbs"]
        lines += [
            f"| {n} | save | save_file | {ms['ref_save']:.0f} | {gbs['ref_save']:.2f} | sync save_state_dict "
            f"| {ms['sync_save']:.0f} | {gbs['sync_save']:.2f} | {s['save_ratio']:.2f} "
            f"| {yes(s['save_ratio'] >= GOAL_RATIO)} |",
            f"| {n} | save, durable | save_file + fsync | {ms['ref_save_fsync']:.0f} | {gbs['ref_save_fsync']:.2f} "
            f"| sync save_state_dict | {ms['sync_save']:.0f} | {gbs['sync_save']:.2f} | {s['save_ratio_fsync']:.2f} "
            "| (info) |",
            f"| {n} | save, page cache | save_file | {ms['ref_save']:.0f} | {gbs['ref_save']:.2f} "
            f"| sync save_state_dict, OARLOCK_CHECKPOINT_FSYNC=0 | {ms['sync_save_nofsync']:.0f} "
            f"| {gbs['sync_save_nofsync']:.2f} | {s['save_ratio_nofsync']:.2f} | (info) |",
            f"| {n} | load | load_file | {ms['ref_load']:.0f} | {gbs['ref_load']:.2f} | load_state_dict "
            f"| {ms['load']:.0f} | {gbs['load']:.2f} | {s['load_ratio']:.2f} | {yes(s['load_ratio'] >= GOAL_RATIO)} |",
            f"| {n} | load, into tensors | load_file + copyto | {ms['ref_load_copy']:.0f} "
            f"| {gbs['ref_load_copy']:.2f} | load_state_dict | {ms['load']:.0f} | {gbs['load']:.2f} "
            f"| {s['load_ratio_copy']:.2f} | (info) |"]
    lines += ["", "| ranks | async mode | sync save ms | async blocked ms | blocked / sync | "
              f"goal (< {GOAL_ASYNC:.0%}) | step during save ms | step alone ms | step slowdown | "
              f"goal (< {GOAL_STEP:.0%}) | blocked + step penalty / sync | update right after save ms | update "
              "alone ms | async total ms |",
              "|---:|---|---:|---:|---:|:---:|---:|---:|---:|:---:|---:|---:|---:|---:|"]
    for run in runs:
        s = run["summary"]
        ms = s["ms"]
        for m in ASYNC_MODES:
            fraction = s[f"async_fraction_{m}"]
            lines.append(f"| {run['ranks']} | {m} | {ms['sync_save']:.0f} | {ms[f'async_blocked_{m}']:.1f} "
                         f"| {fraction:.1%} | {yes(fraction < GOAL_ASYNC)} "
                         f"| {ms[f'step_pending_{m}']:.0f} | {ms[f'step_plain_{m}']:.0f} "
                         f"| {s[f'step_slowdown_{m}']:+.1%} | {yes(s[f'step_slowdown_{m}'] < GOAL_STEP)} "
                         f"| {s[f'async_fraction_with_step_{m}']:.1%} | {ms[f'update_pending_{m}']:.0f} "
                         f"| {ms[f'update_plain_{m}']:.0f} | {ms[f'async_total_{m}']:.0f} |")
    lines += ["", "Goals:"]
    for run in runs:
        s = run["summary"]
        lines.append(f"- {run['ranks']} rank(s): save {s['save_ratio']:.2f}x -> {yes(s['save_ratio'] >= GOAL_RATIO)}; "
                     f"load {s['load_ratio']:.2f}x -> {yes(s['load_ratio'] >= GOAL_RATIO)}; "
                     + "; ".join(f"async ({m}) blocked {s[f'async_fraction_{m}']:.1%} of sync -> "
                                 f"{yes(s[f'async_fraction_{m}'] < GOAL_ASYNC)}, step {s[f'step_slowdown_{m}']:+.1%} "
                                 f"-> {yes(s[f'step_slowdown_{m}'] < GOAL_STEP)}" for m in ASYNC_MODES))
    return "\n".join(lines)


# -- the driver ----------------------------------------------------------------------------------------------------
def filesystem_of(path: str) -> str:
    """'DEVICE (TYPE)' of the mount that holds `path`, from /proc/mounts where there is one."""
    path, best = os.path.realpath(path), ("?", "?", "")
    try:
        with open("/proc/mounts") as fh:
            for line in fh:
                device, mount, kind = line.split()[:3]
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[2]):
                    best = (device, kind, mount)
    except OSError:
        pass
    return f"{best[0]} ({best[1]})"


def machine_line(directory: str) -> str:
    import safetensors
    library = mpi_library()
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"machine: {cpus} CPUs ({usable} usable), {memory:.0f} GiB RAM, "
            f"{platform.processor() or platform.machine()}; files in {directory} on {filesystem_of(directory)}; "
            f"MPI: {library}; safetensors {safetensors.__version__}; numpy {np.__version__}; "
            f"Python {platform.python_version()}")


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    line = f"load average (1/5/15 min): {one:.2f} {five:.2f} {fifteen:.2f}"
    if one > LOAD_WARNING:
        line += f"  -- above {LOAD_WARNING:g}: other jobs on this host are taking cores and distort the timing"
    return line


def rank_arguments(args) -> list:
    return ["--gb", repr(args.gb), "--repeats", str(args.repeats)] + (["--cold"] if args.cold else [])


def drive(args) -> int:
    try:
        import safetensors.numpy  # noqa: F401
    except ImportError as exc:
        print(f"checkpoint.py: the safetensors library is needed as the reference ({exc}); "
              "install it with `pip install safetensors`", file=sys.stderr)
        return 2
    launcher = find_launcher(args.mpiexec, "checkpoint.py")
    if launcher is None:
        return 2
    os.makedirs(args.dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="oarlock-checkpoint-bench-", dir=args.dir)
    machine = machine_line(base)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    spec = model_spec(args.gb * 1e9)
    total = sum(nbytes(shape, dtype) for _, shape, dtype in spec)
    print(machine)
    print(load_line())
    print(f"state dict: {len(spec)} tensors, {total / 1e9:.3f} GB ({spec[0][0]} {list(spec[0][1])} float32, "
          f"{(len(spec) - 2) // 7} layers of hidden {spec[0][1][1]}: float32 attention, bfloat16 MLP, float32 norms), "
          "each sharded along axis 0 over the ranks")
    over = [n for n in args.ranks if n > usable]
    if over:
        print(f"note: {', '.join(map(str, over))} ranks on {usable} usable cores are oversubscribed: ranks share "
              "cores, so per-rank CPU work (copies, checksums, header encoding) is serialized")
    print("note: " + ("--cold: files were evicted with posix_fadvise(DONTNEED) before the loads (the kernel may keep "
                      "some pages)" if args.cold else
                      "loads read files written moments before, so they come from the page cache (reference and "
                      "oarlock alike); the page cache is not dropped (needs root)"))
    print(f"Goals: oarlock sync save and load >= {GOAL_RATIO}x the safetensors library's throughput (save_file "
          f"without fsync); async save blocks the caller < {GOAL_ASYNC:.0%} of a sync save's time and slows the "
          f"training step meanwhile by < {GOAL_STEP:.0%}.", flush=True)
    results, runs, status = {"machine": machine, "load_average_start": os.getloadavg(), "gb": args.gb,
                             "goal": {"ratio": GOAL_RATIO, "async_fraction": GOAL_ASYNC,
                                      "step_slowdown": GOAL_STEP}, "runs": []}, [], 0
    try:
        for nranks in args.ranks:
            run_dir = os.path.join(base, f"{nranks}ranks")
            os.makedirs(run_dir)
            # the ranks print nothing on stdout; rank 0's progress and any error pass through on stderr
            run = run_ranks(launcher, nranks, __file__, rank_arguments(args), args.timeout, {RUN_DIR_ENV: run_dir})
            if run is None:
                status = 1
                continue
            run["summary"] = summarize(run)
            runs.append(run)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if runs:
        print()
        print(render(runs, args))
    print()
    print(load_line() + " (at the end)", flush=True)
    results["runs"] = runs
    results["load_average_end"] = os.getloadavg()
    save_json(args.json, results)
    return status


def main(argv=None) -> int:
    return entry(settle(build_parser().parse_args(argv)), run_rank, drive)


if __name__ == "__main__":
    sys.exit(main())
