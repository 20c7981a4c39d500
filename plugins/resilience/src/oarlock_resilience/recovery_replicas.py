"""In-memory checkpoint replicas: rank r's checkpoint files copied to its buddy, rank (r + 1) % world.

Transfer. After every save each rank packs its files (data file, random generators, the metadata on
the coordinator, and the manifest) into one byte buffer and posts a non-blocking send of it to its
buddy and a non-blocking receive of its predecessor's buffer, on a process group of its own (so the
replica traffic never matches a training send or receive). Training goes on meanwhile; the transfer
is completed at the next save, at flush_replicas(), or when the program ends normally.

Where the replica lives. A replica must outlive the job that made it: when a rank dies, the launcher
(`oarlock launch --max-restarts`) restarts every rank, so a Python object in the buddy's process would
die with it. The buddy therefore writes what it received into a node-local memory file system, /dev/shm
(OARLOCK_REPLICA_DIR overrides the root; a tmpfs is RAM, not disk), as

    <root>/oarlock-replicas-<key of the checkpoint path>/held-by-{buddy}/rank{owner}/<files>

It survives the restart of the job and the loss of the owner's checkpoint directory, not a reboot of the
buddy's node. With mirror=DIR the buddy also writes the replica to DIR/rank{owner}/, standing for
another node's disk. Only the latest `keep` checkpoints are kept in each place.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import tempfile

import numpy as np

from oarlock_resilience import recovery_files as files

ROOT_ENV = "OARLOCK_REPLICA_DIR"


def store_root() -> str:
    """The node-local memory directory holding the replicas (OARLOCK_REPLICA_DIR, else /dev/shm)."""
    explicit = os.environ.get(ROOT_ENV)
    if explicit:
        return explicit
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def store_dir(path: str) -> str:
    """The replica store of the checkpoint directory `path` (one per checkpoint directory, on this node)."""
    key = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    return os.path.join(store_root(), f"oarlock-replicas-{key}")


def held_dir(path: str, holder: int, owner: int) -> str:
    return os.path.join(store_dir(path), f"held-by-{holder}", f"rank{owner}")


def _header(names: list, lengths: list) -> bytes:
    return json.dumps([[name, length] for name, length in zip(names, lengths)]).encode()


def pack(directory: str, names: list) -> bytes:
    """The files `names` of `directory` as one buffer: a JSON header (names and sizes) and the bytes."""
    blobs = []
    for name in names:
        with open(os.path.join(directory, name), "rb") as fh:
            blobs.append(fh.read())
    header = _header(names, [len(blob) for blob in blobs])
    return len(header).to_bytes(8, "little") + header + b"".join(blobs)


def packed_size(directory: str, names: list, listed: dict) -> int:
    """The size of pack() of another rank's files `names` (all in `listed`, its manifest entries, but the
    manifest itself, which is the same on every rank and is read from `directory`): the receive's size."""
    lengths = [listed[name]["bytes"] if name in listed else os.path.getsize(os.path.join(directory, name))
               for name in names]
    return 8 + len(_header(names, lengths)) + sum(lengths)


def unpack(buffer: bytes) -> list:
    """[(name, bytes)] of a pack() buffer."""
    size = int.from_bytes(buffer[:8], "little")
    entries = json.loads(buffer[8:8 + size])
    out, offset = [], 8 + size
    for name, length in entries:
        out.append((name, buffer[offset:offset + length]))
        offset += length
    return out


class Replicator:
    """Sends this rank's checkpoint files to its buddy and keeps what its predecessor sends, in the store."""

    def __init__(self, path: str, rank: int, world: int, group, mirror: str | None, keep: int):
        self.path, self.rank, self.world, self.group = path, rank, world, group
        self.mirror, self.keep = mirror, keep
        self.pending = None   # (send task, receive task, receive buffer, step, owner, send buffer)
        atexit.register(self.flush)

    @property
    def buddy(self) -> int:
        return (self.rank + 1) % self.world

    @property
    def predecessor(self) -> int:
        return (self.rank - 1) % self.world

    def post(self, step: int, directory: str, names: list, sizes: list) -> None:
        """Start sending this rank's files `names` of `directory` (checkpoint `step`) to the buddy and
        receiving the predecessor's, whose packed size is sizes[predecessor]. Returns at once."""
        import oarlock
        import oarlock.distributed as dist
        self.flush()
        outgoing = oarlock.to_tensor(np.frombuffer(pack(directory, names), dtype=np.uint8).copy())
        incoming = oarlock.zeros([sizes[self.predecessor]], dtype="uint8")
        receive = dist.irecv(incoming, src=self.predecessor, group=self.group)
        send = dist.isend(outgoing, dst=self.buddy, group=self.group)
        self.pending = (send, receive, incoming, step, self.predecessor, outgoing)

    def flush(self) -> None:
        """Complete the transfer in flight, if any, and store the replica received."""
        if self.pending is None:
            return
        send, receive, incoming, step, owner, _ = self.pending
        self.pending = None
        receive.wait()
        send.wait()
        data = np.asarray(incoming.numpy()).tobytes()
        targets = [held_dir(self.path, self.rank, owner)]
        if self.mirror is not None:
            targets.append(files.rank_dir(self.mirror, owner))
        for target in targets:
            write_replica(target, unpack(data), step, self.keep)


def write_replica(directory: str, entries: list, step: int, keep: int) -> None:
    """Write the files of a replica into `directory`, the manifest last, and drop older steps beyond `keep`."""
    os.makedirs(directory, exist_ok=True)
    manifest = [(name, data) for name, data in entries if name.endswith(files.MANIFEST)]
    for name, data in entries:
        if not name.endswith(files.MANIFEST):
            files.write_atomic(os.path.join(directory, name), data)
    for name, data in manifest:
        files.write_atomic(os.path.join(directory, name), data)
    steps = sorted(files.manifests_in(directory))
    files.prune(directory, set(steps[-keep:]) | {step})
