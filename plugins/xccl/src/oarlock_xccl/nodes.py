"""Several MPI jobs joined into one world: `oarlock launch --nnodes K --node-rank R --master HOST:PORT`.

Each node runs its own launcher, which starts its ranks with its own mpiexec: K separate MPI jobs.
They become one world through MPI's dynamic-process interface, which MPICH implements over TCP:

1. The rendezvous. The launcher of node 0 serves a tiny key-value store on --master (one line per
   request, "SET key value" / "GET key"), which every launcher and rank reaches over TCP.
2. Rank 0 of node 0 opens an MPI port (MPI_Open_port) and publishes its name as "mpi-port".
3. Node 0's ranks accept one node at a time (MPI_Comm_accept, collective over the world built so far);
   the ranks of every other node fetch the port name and connect (MPI_Comm_connect, collective over
   their own job). Each accepted node is merged in (MPI_Intercomm_merge), and the number of nodes
   joined so far is broadcast, so the nodes may arrive in any order.
4. The merged communicator is re-ordered (MPI_Comm_split) so that global rank = node rank * N + local
   rank, and replaces mpi4py's MPI.COMM_WORLD in this process: everything in oarlock-xccl that reads
   MPI.COMM_WORLD (groups, the bootstrap and watchdog communicators, the agreement check) sees the
   whole world.
5. A node whose ranks fail tells the others through the rendezvous ("abort"): their launchers stop
   their ranks too (oarlock_xccl.launch polls it), so a multi-node job ends on every node.

Rank 0 of every node reads the port name; node 0's launcher must be reachable at --master from every
node, and nodes must reach each other's ranks over TCP (MPICH's port names are host:port addresses).

Processes started one by one by another launcher (srun without an MPI built for Slurm's PMI, Paddle's
`python -m paddle.distributed.launch`) are joined the same way, each process a node of one rank: when
init_parallel_env finds PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM (or srun's SLURM_PROCID /
SLURM_STEP_NUM_TASKS) announcing several ranks, no MPI launcher around it, and a rendezvous address
(OARLOCK_MASTER, PADDLE_MASTER, or MASTER_ADDR and MASTER_PORT), the process replaces itself
(exec) by `mpiexec -launcher fork -n 1` running its own command line again: two MPI singletons cannot
connect (MPICH gives them the same process ids), processes of separate mpiexec jobs can. The
announced rank 0 serves the rendezvous itself. What the script did before init_parallel_env runs twice.
"""

from __future__ import annotations

import os
import shutil
import socket
import socketserver
import sys
import threading
import time

NNODES_ENV = "OARLOCK_NNODES"
NODE_RANK_ENV = "OARLOCK_NODE_RANK"
MASTER_ENV = "OARLOCK_MASTER"
NPROC_ENV = "OARLOCK_NPROC_PER_NODE"
JOIN_TIMEOUT_S = float(os.environ.get("OARLOCK_RENDEZVOUS_TIMEOUT", "300"))   # waiting for the port name
SERVE_ENV = "OARLOCK_SERVE_RENDEZVOUS"   # set for the process that serves the rendezvous itself
REWIRED_ENV = "OARLOCK_REWIRED"          # set once a process started alone re-ran itself under mpiexec
PORT_KEY, ABORT_KEY = "mpi-port", "abort"


def global_view(local_rank: int, local_size: int) -> tuple[int, int]:
    """(global rank, world size) of a rank its node's MPI launcher calls local_rank of local_size, before the
    nodes' worlds are joined: under --nnodes K, node R's ranks follow nodes 0..R-1's, each node NPROC_PER_NODE
    ranks; outside a multi-node job, the launcher's own figures."""
    nnodes = os.environ.get(NNODES_ENV, "").strip()
    if not nnodes.isdigit() or int(nnodes) <= 1:
        return local_rank, local_size
    per_node = int(os.environ.get(NPROC_ENV, str(local_size)))
    return int(os.environ.get(NODE_RANK_ENV, "0")) * per_node + local_rank, int(nnodes) * per_node
_served: list = []                       # the Rendezvous this process serves (kept for its lifetime)


def parse_master(value: str, where: str) -> tuple[str, int]:
    """("host", port) of a --master / OARLOCK_MASTER value "host:port"; ValueError naming `where` otherwise."""
    host, sep, port = str(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{where}: expected HOST:PORT (e.g. 10.0.0.1:29500), got {value!r}")
    return host, int(port)


# -- the rendezvous store --------------------------------------------------------------------------------------------
class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline().decode(errors="replace").rstrip("\n")
        verb, _, rest = line.partition(" ")
        store = self.server.store
        if verb == "SET":
            key, _, value = rest.partition(" ")
            with self.server.lock:
                store.setdefault(key, value)   # the first value stays: e.g. the first node's abort reason
            self.wfile.write(b"OK\n")
        elif verb == "GET":
            with self.server.lock:
                value = store.get(rest)
            self.wfile.write(b"NONE\n" if value is None else f"VALUE {value}\n".encode())
        else:
            self.wfile.write(b"ERROR\n")


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class Rendezvous:
    """The key-value store served by node 0's launcher while its job runs."""

    def __init__(self, master: str):
        host, port = parse_master(master, "oarlock launch --master")
        self.server = _Server(("" if host not in ("127.0.0.1", "localhost") else host, port), _Handler)
        self.server.store, self.server.lock = {}, threading.Lock()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True, name="oarlock-rendezvous")
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def request(master: str, line: str, timeout: float = 5.0) -> str | None:
    """Send one request to the rendezvous at `master`; returns the reply line, None when unreachable."""
    host, port = parse_master(master, MASTER_ENV)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(line.encode() + b"\n")
            reply = sock.makefile("rb").readline().decode(errors="replace").rstrip("\n")
    except OSError:
        return None
    return reply


def put(master: str, key: str, value: str) -> bool:
    return request(master, f"SET {key} {value}") == "OK"


def get(master: str, key: str) -> str | None:
    reply = request(master, f"GET {key}")
    return reply[len("VALUE "):] if reply and reply.startswith("VALUE ") else None


def wait_for(master: str, key: str, timeout: float = JOIN_TIMEOUT_S) -> str:
    deadline = time.monotonic() + timeout
    while (value := get(master, key)) is None:
        if time.monotonic() >= deadline:
            raise RuntimeError(f"oarlock.distributed: no {key!r} from the rendezvous at {master} within {timeout:g} s "
                               f"(is node 0's `oarlock launch --node-rank 0` running and reachable there?)")
        time.sleep(0.05)
    return value


# -- the ranks' side ---------------------------------------------------------------------------------------------------
def configured() -> tuple[int, int, str] | None:
    """(nnodes, node rank, master) when this rank belongs to a multi-node launch, else None."""
    nnodes = int(os.environ.get(NNODES_ENV, "1") or 1)
    if nnodes <= 1:
        return None
    return nnodes, int(os.environ.get(NODE_RANK_ENV, "0")), os.environ[MASTER_ENV]


def announced_master() -> str | None:
    """The rendezvous address the environment gives: OARLOCK_MASTER, PADDLE_MASTER, or MASTER_ADDR:MASTER_PORT."""
    for name in (MASTER_ENV, "PADDLE_MASTER"):
        if os.environ.get(name):
            return os.environ[name]
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    return None


def rewire_alone() -> None:
    """A process started without an MPI launcher while the environment announces rank r of W > 1 (and a
    rendezvous address): re-run it under `mpiexec -n 1` as node r of W (see the module docstring). Returns
    when there is nothing to do; otherwise does not return. Called before MPI starts."""
    from oarlock_xccl import failure, world
    if os.environ.get(REWIRED_ENV) or configured() is not None or any(os.environ.get(n) for n in failure.RANK_ENVS):
        return
    found, master = world.announced(), announced_master()
    if found is None or found[1] <= 1 or master is None or not hasattr(os, "execve"):
        return   # without a rendezvous address world._check_announced says what is missing
    rank, size, _ = found
    parse_master(master, "the rendezvous address")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.access(mpiexec, os.X_OK):
        mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        return
    env = dict(os.environ, **{NNODES_ENV: str(size), NODE_RANK_ENV: str(rank), MASTER_ENV: master, NPROC_ENV: "1",
                              REWIRED_ENV: "1"})
    if rank == 0:
        env[SERVE_ENV] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(mpiexec, [mpiexec, "-launcher", "fork", "-n", "1", sys.executable, *sys.orig_argv[1:]], env)


def join(mpi) -> None:
    """Join this node's MPI job with the other nodes' (steps 2-4 above); collective over the local
    COMM_WORLD, called before anything else uses MPI. Replaces mpi.COMM_WORLD by the joined world."""
    settings = configured()
    if settings is None:
        return
    nnodes, node_rank, master = settings
    local = mpi.COMM_WORLD
    port = None
    if node_rank == 0:
        if local.rank == 0:
            if os.environ.get(SERVE_ENV) and not _served:
                _served.append(Rendezvous(master))
            port = mpi.Open_port()
            if not put(master, PORT_KEY, port):
                raise RuntimeError(f"oarlock.distributed: cannot publish the MPI port at the rendezvous {master}")
        comm, joined = local, 1
    else:
        name = wait_for(master, PORT_KEY) if local.rank == 0 else None
        inter = local.Connect(name, root=0)
        comm, joined = inter.Merge(high=True), None
        inter.Free()
    while (joined := comm.bcast(joined, root=0)) < nnodes:   # root 0: node 0's rank 0, which holds the port
        inter = comm.Accept(port, root=0)
        merged = inter.Merge(high=False)
        inter.Free()
        if comm is not local:
            comm.Free()
        comm, joined = merged, joined + 1
    if port is not None:
        mpi.Close_port(port)
    ordered = comm.Split(0, key=(node_rank << 20) | local.rank)
    comm.Free()
    expected = os.environ.get(NPROC_ENV)
    if expected and expected.isdigit() and ordered.size != nnodes * int(expected):
        raise RuntimeError(f"oarlock.distributed: the {nnodes} nodes joined into {ordered.size} ranks, expected "
                           f"{nnodes} x {expected}: every node's launcher must use the same -n")
    mpi.COMM_WORLD = ordered
