"""save / resume: checkpoints that survive a lost rank, a lost disk and a restart on fewer ranks.

    from oarlock.distributed import resilience
    state = {"model": model.sharded_state_dict(), "opt": opt.sharded_state_dict(model.sharded_state_dict())}
    start = resilience.resume(state, "ckpt")          # None on a fresh start, else the step restored
    for step in range(0 if start is None else start + 1, steps):
        train_step(batch_of(step))                    # the data of a step must depend on the step alone
        if step % every == 0:
            resilience.save(state, "ckpt", step)

Run it under `oarlock launch -n N --max-restarts K script.py`: a rank that dies (signal, exception, a
hang the collective watchdog catches) stops the job, the launcher starts it again, and the script goes
on from the latest checkpoint every rank can rebuild. Restored: the tensors of `state` (FlexCheckpoint,
re-sharded when the world size changed), the step, and every rank's random generators (oarlock's,
numpy's, Python's), so with an unchanged world the resumed run computes bit for bit what an
uninterrupted one does. The data order is the script's: feed step s the batch of step s.

Files: recovery_files (layout, manifest, SHA-256), recovery_replicas (buddy copies in node memory),
recovery_restore (choose, verify, rebuild), recovery_rng (generators).
"""

from __future__ import annotations

import os
import shutil

from oarlock_resilience import recovery_files as files
from oarlock_resilience import recovery_replicas as replicas
from oarlock_resilience import recovery_restore as restore
from oarlock_resilience import recovery_rng as rng

_replicators: dict = {}   # (checkpoint path, world size) -> Replicator of this process
_last: dict = {}


def _world() -> tuple[int, int]:
    import oarlock.distributed as dist
    return dist.get_rank(), dist.get_world_size()


def _gather(obj) -> list:
    import oarlock.distributed as dist
    if dist.get_world_size() == 1:
        return [obj]
    out: list = []
    dist.all_gather_object(out, obj)
    return out


def _check(name: str, value, accepts: str, ok: bool):
    if not ok:
        raise ValueError(f"oarlock.distributed.resilience.{name}: got {value!r}; accepts {accepts}")


def save(state_dict, path, step, mirror=None, keep=2, replicate=True) -> None:
    """Save `state_dict` as the checkpoint of `step` under `path` (every rank calls it, like
    save_state_dict): rank r writes into path/rank{r}, the manifest lists every file with its SHA-256,
    and (with more than one rank) rank r's files are sent asynchronously to rank (r + 1) % world, which
    keeps them in its node's memory store and, with `mirror`, in mirror/rank{r}. The `keep` latest
    checkpoints are kept in each place. replicate=False skips the copies."""
    import oarlock.distributed as dist
    _check("save(step=...)", step, "an int >= 0", isinstance(step, int) and not isinstance(step, bool) and step >= 0)
    _check("save(keep=...)", keep, "an int >= 1", isinstance(keep, int) and keep >= 1)
    path = os.fspath(path)
    rank, world = _world()
    replicator = _replicator(path, rank, world, mirror, keep) if replicate and world > 1 else None
    if replicator is not None:
        replicator.flush()   # the previous checkpoint's copies first: one transfer in flight at a time
    directory = files.rank_dir(path, rank)
    os.makedirs(directory, exist_ok=True)
    rng_file = files.rng_name(rank, step)
    files.write_atomic(os.path.join(directory, rng_file), rng.capture())
    dist.save_state_dict(state_dict, directory, unique_id=step)
    names = sorted(name for name in os.listdir(directory)
                   if name == rng_file or name == f"{step}.metadata" or
                   (name.startswith(f"{rank}_{step}.") and name.endswith((".safetensors", ".distcp"))))
    mine = {name: {"rank": rank, "sha256": files.sha256_file(os.path.join(directory, name)),
                   "bytes": os.path.getsize(os.path.join(directory, name))} for name in names}
    listed = _gather(mine)
    manifest = {"step": step, "world_size": world, "files": {k: v for part in listed for k, v in part.items()}}
    files.write_manifest(directory, manifest)
    if replicator is not None:
        sizes = [replicas.packed_size(directory, [*sorted(part), files.manifest_name(step)], part)
                 for part in listed]
        replicator.post(step, directory, [*names, files.manifest_name(step)], sizes)
    kept = sorted(files.manifests_in(directory))[-keep:]
    files.prune(directory, set(kept) | {step})


def _replicator(path: str, rank: int, world: int, mirror, keep: int):
    key = (os.path.abspath(path), world)
    if key not in _replicators:
        import oarlock.distributed as dist
        group = dist.new_group(list(range(world)))   # collective: every rank's first save creates it
        _replicators[key] = replicas.Replicator(path, rank, world, group, mirror, keep)
    return _replicators[key]


def flush_replicas() -> None:
    """Complete the replica transfers in flight (every rank calls it; save() and the end of the program do)."""
    for replicator in _replicators.values():
        replicator.flush()


def resume(state_dict, path, mirror=None):
    """Restore the latest checkpoint under `path` that can be rebuilt into `state_dict` in place, and the
    random generators; returns its step, or None when there is no checkpoint at all (a fresh start).
    Every rank calls it. Each file comes from the first copy whose SHA-256 matches the manifest: the
    owner's directory, else a buddy's replica in memory, else `mirror`; a lost or damaged directory is
    rebuilt from it. A different world size than the saving one is fine: FlexCheckpoint re-shards (the
    random generators of ranks that did not exist are left as they are)."""
    import oarlock.distributed as dist
    path = os.fspath(path)
    rank, world = _world()
    flush_replicas()
    found = restore.choose_and_repair(path, mirror, rank, _gather)
    _last.clear()
    if found is None:
        _last.update(step=None, rebuilt=[], rejected=[])
        return None
    step, manifest = found["step"], found["manifest"]
    view = os.path.join(path, f".restore-{step}")
    if rank == 0:
        _link_view(path, view, manifest)
    _gather(None)   # the view exists before anyone reads it
    try:
        dist.load_state_dict(state_dict, view, unique_id=step)
    finally:
        _gather(None)
        if rank == 0:
            shutil.rmtree(view, ignore_errors=True)
    mine = files.rng_name(rank, step)
    if mine in manifest["files"]:
        with open(os.path.join(files.rank_dir(path, rank), mine), "rb") as fh:
            rng.restore(fh.read())
    _last.update(step=step, saved_world_size=manifest["world_size"], rebuilt=found["rebuilt"],
                 rejected=found["rejected"])
    return step


def _link_view(path: str, view: str, manifest: dict) -> None:
    """One directory of links to every data and metadata file of the checkpoint, as FlexCheckpoint loads it
    (the files stay in their rank directories)."""
    shutil.rmtree(view, ignore_errors=True)
    os.makedirs(view)
    for name, info in manifest["files"].items():
        if not name.endswith(files.RNG):
            os.symlink(os.path.abspath(os.path.join(files.rank_dir(path, info["rank"]), name)),
                       os.path.join(view, name))


def last_restore() -> dict:
    """What the last resume() did: {"step", "saved_world_size", "rebuilt": [(file, source kind, source)],
    "rejected": [why a copy was not used]}."""
    return dict(_last)


def remove_replicas(path) -> None:
    """Remove this node's replica store of `path` (call it on one rank per node when the job is done:
    the store lives in memory, /dev/shm, until removed)."""
    flush_replicas()
    shutil.rmtree(replicas.store_dir(os.fspath(path)), ignore_errors=True)
