"""In-memory checkpoint replicas: rank r's checkpoint files copied to its buddy, rank (r + 1) % world.

Transfer. After every save each rank packs its files (data file, random generators, the metadata on
the coordinator, and the manifest) into one byte buffer and posts a non-blocking send of it to its
buddy and a non-blocking receive of its predecessor's buffer, on a process group of its own (so the
replica traffic never matches a training send or receive). Training goes on meanwhile: a background
thread polls the two requests (MPI runs with MPI_THREAD_MULTIPLE) and stores the replica as soon as it
has arrived. The next save, flush_replicas() and the normal end of the program wait for it (then under
the collective watchdog, so a buddy that died is an error after the timeout, not a hang).

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
import threading
import time

import numpy as np

from oarlock_resilience import recovery_files as files

ROOT_ENV = "OARLOCK_REPLICA_DIR"
POLL_S = 0.02   # how often the background thread tests the transfer in flight


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
        self.pending = _Transfer(send, receive, incoming, outgoing, step, self.predecessor)
        self.pending.thread = threading.Thread(target=self._complete_in_background, args=(self.pending,),
                                               daemon=True, name="oarlock-replica")
        self.pending.thread.start()

    def _complete_in_background(self, transfer) -> None:
        while not transfer.stop.is_set():
            with transfer.lock:
                if transfer.receive.is_completed() and transfer.send.is_completed():
                    self._store(transfer)
                    return
            time.sleep(POLL_S)

    def flush(self) -> None:
        """Complete the transfer in flight, if any, and store the replica received."""
        transfer, self.pending = self.pending, None
        if transfer is None:
            return
        transfer.stop.set()
        transfer.thread.join()
        with transfer.lock:
            if not transfer.stored:
                transfer.receive.wait()
                transfer.send.wait()
                self._store(transfer)

    def _store(self, transfer) -> None:
        data = np.asarray(transfer.incoming.numpy()).tobytes()
        targets = [held_dir(self.path, self.rank, transfer.owner)]
        if self.mirror is not None:
            targets.append(files.rank_dir(self.mirror, transfer.owner))
        for target in targets:
            write_replica(target, unpack(data), transfer.step, self.keep)
        transfer.stored = True


class _Transfer:
    """One checkpoint's replica exchange in flight (the tensors are kept alive until it completes)."""

    def __init__(self, send, receive, incoming, outgoing, step: int, owner: int):
        self.send, self.receive, self.incoming, self.outgoing = send, receive, incoming, outgoing
        self.step, self.owner = step, owner
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.stored = False
        self.thread: threading.Thread | None = None


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
