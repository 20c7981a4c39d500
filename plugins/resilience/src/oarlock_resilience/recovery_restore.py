"""Reassembling the latest complete checkpoint from every copy the ranks can see (resume's first half).

1. Every rank lists the copies it can read, per step and file: the owner's own directory
   (path/rank{r}), the replicas in this node's memory store (held-by-*/rank{r}) and the mirror
   (mirror/rank{r}), in that order of preference. The lists are gathered on every rank.
2. From the newest step down, each file of the step's manifest is given to the first rank that sees a
   copy; that rank checks the copy's SHA-256 against the manifest. A bad copy is reported and the next
   copy of that file is tried (next round); a step whose file has no good copy left is skipped.
3. A verified copy that is not in the owner's own directory is written there (a lost or damaged
   rank directory is rebuilt), so the checkpoint is whole again before anything is loaded.

The decisions are taken from gathered data by the same code on every rank: every rank reaches the
same step, or the same error.
"""

from __future__ import annotations

import glob
import os

from oarlock_resilience import recovery_files as files
from oarlock_resilience import recovery_replicas as replicas

WHERE = "oarlock.distributed.resilience.resume()"
KINDS = ("own directory", "replica in memory", "mirror")


def visible_copies(path: str, mirror: str | None) -> dict:
    """{step: {"manifest": manifest, "copies": {name: [(kind, file path)]}}} of what this rank can read."""
    places = []   # (kind, owner directory pattern)
    places.append((0, os.path.join(path, "rank*")))
    places.append((1, os.path.join(replicas.store_dir(path), "held-by-*", "rank*")))
    if mirror is not None:
        places.append((2, os.path.join(mirror, "rank*")))
    found: dict = {}
    for kind, pattern in places:
        for directory in sorted(glob.glob(pattern)):
            for step, manifest in files.manifests_in(directory).items():
                entry = found.setdefault(step, {"manifest": manifest, "copies": {}})
                owner = os.path.basename(directory)
                for name, info in manifest["files"].items():
                    if f"rank{info['rank']}" != owner:
                        continue
                    candidate = os.path.join(directory, name)
                    if os.path.isfile(candidate):
                        entry["copies"].setdefault(name, []).append((kind, candidate))
    return found


def _candidates(gathered: list, step: int) -> tuple[dict | None, dict]:
    """(the step's manifest, {name: [(kind, reader rank, file path)] in order of preference})."""
    manifest, copies = None, {}
    for reader, seen in enumerate(gathered):
        entry = seen.get(step)
        if entry is None:
            continue
        manifest = manifest or entry["manifest"]
        for name, where in entry["copies"].items():
            copies.setdefault(name, []).extend((kind, reader, file) for kind, file in where)
    for where in copies.values():
        where.sort(key=lambda item: (item[0], item[1]))
    return manifest, copies


def choose_and_repair(path: str, mirror: str | None, rank: int, gather) -> dict | None:
    """Find the newest step whose every file has a verified copy, rebuild the owners' directories from
    those copies, and return {"step", "manifest", "rebuilt": [(file, source kind, source path)],
    "rejected": [...]}; None when no checkpoint exists anywhere. `gather(obj)` is all_gather_object over
    the job. Raises RuntimeError (on every rank) when checkpoints exist but none can be reassembled."""
    gathered = gather(visible_copies(path, mirror))
    steps = sorted({step for seen in gathered for step in seen}, reverse=True)
    if not steps:
        return None
    problems = []
    for step in steps:
        manifest, copies = _candidates(gathered, step)
        chosen, rejected, missing = _verify(manifest, copies, rank, gather)
        if missing:
            problems.append(f"step {step}: no good copy of {', '.join(missing)} ({'; '.join(rejected) or 'none seen'})")
            continue
        rebuilt = _repair(path, manifest, chosen, rank, gather)
        return {"step": step, "manifest": manifest, "rebuilt": rebuilt, "rejected": rejected}
    raise RuntimeError(f"{WHERE}: no checkpoint in {path!r} can be reassembled from its own directories, the "
                       f"replicas in memory ({replicas.store_dir(path)})"
                       f"{'' if mirror is None else f' or the mirror {mirror!r}'}: " + " | ".join(problems))


def _verify(manifest: dict, copies: dict, rank: int, gather) -> tuple[dict, list, list]:
    """Check copies until every file of the manifest has a good one or has none left.
    Returns ({name: (kind, reader, path)}, ["why a copy was rejected"], [names without a good copy])."""
    names = sorted(manifest["files"])
    position = {name: 0 for name in names}
    chosen, rejected = {}, []
    while True:
        todo = {name: copies.get(name, [])[position[name]] for name in names
                if name not in chosen and position[name] < len(copies.get(name, []))}
        if not todo:
            break
        mine = {name: _check(file, manifest["files"][name]["sha256"])
                for name, (kind, reader, file) in todo.items() if reader == rank}
        verdicts = {}
        for results in gather(mine):
            verdicts.update(results)
        for name, candidate in todo.items():
            why = verdicts[name]
            if why is None:
                chosen[name] = candidate
            else:
                rejected.append(f"{KINDS[candidate[0]]} {candidate[2]} (seen by rank {candidate[1]}): {why}")
                position[name] += 1
    return chosen, rejected, [name for name in names if name not in chosen]


def _check(file: str, expected: str) -> str | None:
    """None when `file` holds the bytes the manifest's SHA-256 names, else why not."""
    try:
        actual = files.sha256_file(file)
    except OSError as exc:
        return f"unreadable: {exc}"
    return None if actual == expected else f"SHA-256 {actual[:16]}... where the manifest says {expected[:16]}..."


def _repair(path: str, manifest: dict, chosen: dict, rank: int, gather) -> list:
    """Write every verified copy that is not in its owner's own directory there (by the rank that
    verified it), with the manifest; returns [(file written, source kind, source path)] on every rank."""
    mine = []
    for name, (kind, reader, source) in sorted(chosen.items()):
        owner_dir = files.rank_dir(path, manifest["files"][name]["rank"])
        target = os.path.join(owner_dir, name)
        if reader != rank or (kind == 0 and os.path.abspath(source) == os.path.abspath(target)):
            continue
        os.makedirs(owner_dir, exist_ok=True)
        files.copy_atomic(source, target)
        mine.append((target, KINDS[kind], source))
    if rank == 0:   # every owner directory gets the manifest back (one writer: the same bytes everywhere)
        for owner in sorted({info["rank"] for info in manifest["files"].values()}):
            owner_dir = files.rank_dir(path, owner)
            if files.read_manifest(os.path.join(owner_dir, files.manifest_name(manifest["step"]))) != manifest:
                os.makedirs(owner_dir, exist_ok=True)
                files.write_manifest(owner_dir, manifest)
    return [item for done in gather(mine) for item in done]
