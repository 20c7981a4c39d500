"""`oarlock launch -n N script.py [args...]`: run a Python script as N ranks of an MPI job.

The ranks are started by the installed MPI launcher (`mpiexec -n N python -u -m
oarlock_xccl.rank script.py args...`); this command adds what mpiexec lacks:

* rank-prefixed output. Every rank connects its fds 1 and 2 to two FIFOs in a
  private launch directory (see oarlock_xccl.rank); one thread per FIFO prints
  each line as "[rank R] line" on the launcher's stdout or stderr. Working at
  the fd level catches C-level output and child processes too.
* failure detection, naming the rank and the cause. A rank whose script
  raises writes an error record (oarlock_xccl.failure). Every rank's script
  runs under a supervisor (oarlock_xccl.supervisor), which records how the
  script's process ended: an exit code (os._exit, a C-level exit) or a signal.
  mpiexec could not tell: Hydra reports one aggregate code. A rank gone
  without any record (its supervisor was killed) is noticed through the pid it
  recorded at start. MPICH's Hydra waits for the remaining ranks when one
  exits non-zero, so the launcher names the failed rank, gives the job --grace
  seconds to end by itself, then stops it.
* no leftovers. Hydra starts its proxy and every rank in sessions of their own
  (setsid), so signalling mpiexec's process group does not reach them. The
  launcher finds the job's processes through /proc instead: the descendants of
  mpiexec plus every process in the sessions of mpiexec and of the ranks (which
  also catches a rank's children that were re-parented to init), and sends
  them SIGTERM, then SIGKILL. This runs on every exit path, including SIGINT,
  SIGTERM and SIGHUP to the launcher. A launcher killed by SIGKILL runs
  nothing: then every rank's supervisor, which checks the launcher's pid
  (OARLOCK_LAUNCHER) twice a second, ends its rank (SIGTERM, SIGKILL 2 s later),
  and mpiexec and its proxies exit once their ranks are gone.

* restarts (--max-restarts K, --min-nproc M): a failed job is stopped as above and
  started again with OARLOCK_RESTART_COUNT set; the script resumes from its checkpoint
  (oarlock.distributed.resilience). On one node only.
* several nodes (--nnodes K --node-rank R --master HOST:PORT): one launcher per node,
  each with its own mpiexec; the ranks join their jobs into one MPI world through a
  rendezvous served by node 0's launcher (oarlock_xccl.nodes). A node whose rank
  fails announces it there and the other nodes' launchers stop their ranks.

Each launcher follows its own node's ranks: they reach it through files and FIFOs in a
local temporary directory, and are followed through this machine's /proc.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from oarlock_xccl import failure, nodes, supervisor
from oarlock_xccl.output import FifoError, OutputPump, launcher_line
from oarlock_xccl.processes import ProcStat, is_alive, job_processes, send_signal

HELP = "run a Python script as N MPI ranks (through mpiexec) with rank-prefixed output; stops the job when a rank fails"

EPILOG = """\
The script and its arguments come last; everything after the script is passed to it untouched.

environment of every rank (besides mpiexec's own, e.g. PMI_RANK):
  OARLOCK_LAUNCH_DIR          a temporary directory owned by the launcher and deleted when it ends; the ranks'
                              output pipes and their start, done, failure and exit records live there
  OARLOCK_LAUNCHER            the launcher's process as PID:START; the ranks end themselves when it is gone
  OARLOCK_COMM_BACKEND        the --backend value; set only when --backend is mpi or nccl
  OARLOCK_COLLECTIVE_TIMEOUT  the --timeout value in seconds; set only when --timeout is given
  OARLOCK_DISTRIBUTED_DEBUG   1 with --debug
  OARLOCK_RESTART_COUNT       with --max-restarts: 0 in the first run, then how many times the job was restarted
  OARLOCK_SDC_CHECK           1 with --sdc-check, SPEC with --sdc-options SPEC (SDCMonitor.from_env reads it)

Every line a rank writes to stdout or stderr is printed as "[rank R] line" on the launcher's stdout or stderr.
When a rank fails (an exception, a non-zero exit status, os._exit or a signal) the launcher names it and the
cause, waits --grace seconds for the job to end by itself, then stops the remaining ranks (SIGTERM, SIGKILL 2 s
later). When the launcher itself is killed, the ranks end themselves within about a second.

With --max-restarts K a failed job is stopped as above and started again (at most K times), on -n ranks or, with
--min-nproc M, on fewer: the failed ranks are left out and the count is rounded down to a divisor of N (at least M).
The script resumes from its latest checkpoint (oarlock.distributed.resilience.resume restores the parameters, the
optimizer, the step and the RNG states).

exit status: the exit code of the first rank that failed (128+N for a rank killed by signal N; for a rank that
vanished without any record: mpiexec's, else 1); else mpiexec's; 128+N when the launcher was stopped by signal N
(130 for Ctrl-C).

With --nnodes K every node runs `oarlock launch --nnodes K --node-rank R --master HOST:PORT -n N SCRIPT ...` (the same
N, script and master); node 0's launcher serves a rendezvous on HOST:PORT, the K MPI jobs join into one world of K x N
ranks (node R's ranks are R*N ... R*N+N-1, also in the output prefixes), and a failure on one node stops every node.
The ranks see OARLOCK_NNODES, OARLOCK_NODE_RANK, OARLOCK_MASTER and OARLOCK_NPROC_PER_NODE. PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, SLURM_PROCID and SLURM_STEP_NUM_TASKS are removed from the ranks' environment: MPI gives the rank.

Each node's ranks run on that node: its launch directory must be theirs too.
"""

BACKEND_ENV = "OARLOCK_COMM_BACKEND"
TIMEOUT_ENV = "OARLOCK_COLLECTIVE_TIMEOUT"
DEBUG_ENV = "OARLOCK_DISTRIBUTED_DEBUG"
RESTART_ENV = "OARLOCK_RESTART_COUNT"
SDC_ENV = "OARLOCK_SDC_CHECK"

POLL_S = 0.1            # how often the launcher looks at mpiexec and the rank records
TERM_WAIT_S = 2.0       # between SIGTERM and SIGKILL
PEER_POLL_S = 0.5       # how often a multi-node launcher asks the rendezvous whether another node failed
_FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class LaunchError(Exception):
    """A problem with the command line or the MPI installation, reported without a traceback."""


# -- command line ----------------------------------------------------------------------------------------------------
def configure(parser: argparse.ArgumentParser) -> None:
    """Add the `oarlock launch` arguments to `parser` (the subcommand's parser)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.usage = ("%(prog)s [-h] -n N [--backend {auto,mpi,nccl}] [--timeout SECONDS] [--grace SECONDS]\n"
                    "       [--sdc-check] [--sdc-options SPEC] [--max-restarts K [--min-nproc M]]\n"
                    "       [--nnodes K --node-rank R --master HOST:PORT] [--mpiexec PATH] SCRIPT [ARGS ...]")
    parser.add_argument("-n", "--nproc", type=int, required=True, metavar="N", help="number of ranks to start")
    from oarlock.registry import default_registry
    backends = ["auto", *sorted(default_registry().comms)]    # every installed library, third-party ones too
    parser.add_argument("--backend", choices=backends, default="auto",
                        help="communication backend of the ranks' process groups, passed as OARLOCK_COMM_BACKEND; "
                             "auto (default) leaves the choice to oarlock.distributed")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="collective timeout of the ranks, passed as OARLOCK_COLLECTIVE_TIMEOUT")
    parser.add_argument("--debug", action="store_true",
                        help="before every collective the ranks check that they call the same one (same op, root "
                             "and shape) and fail at once, naming every rank's call, when they do not "
                             "(OARLOCK_DISTRIBUTED_DEBUG=1; costs one small all_gather per collective)")
    parser.add_argument("--grace", type=float, default=3.0, metavar="SECONDS",
                        help="after a rank failed, how long the job may take to end by itself before the launcher "
                             "stops the other ranks (default 3)")
    parser.add_argument("--sdc-check", action="store_true",
                        help="online silent-data-corruption checks in every rank (OARLOCK_SDC_CHECK=1, read by "
                             "oarlock.distributed.resilience.SDCMonitor.from_env)")
    parser.add_argument("--sdc-options", metavar="SPEC",
                        help="with or without --sdc-check: the checks' settings as OARLOCK_SDC_CHECK=SPEC, e.g. "
                             "interval=2,replay_interval=100")
    parser.add_argument("--max-restarts", type=int, default=0, metavar="K",
                        help="when a rank fails, stop the job and start all ranks again, up to K times (default 0); "
                             "the ranks see OARLOCK_RESTART_COUNT and resume from their latest checkpoint (see "
                             "oarlock.distributed.resilience.resume)")
    parser.add_argument("--min-nproc", type=int, metavar="M",
                        help="with --max-restarts: restart on fewer ranks when ranks failed (the failed ones are "
                             "left out, then the count is rounded down to a divisor of N so that a global batch "
                             "still splits evenly), never fewer than M; without it every restart uses N ranks")
    parser.add_argument("--nnodes", type=int, default=1, metavar="K",
                        help="number of nodes, each running its own `oarlock launch` with the same -n, script and "
                             "--master (default 1); the world is K x N ranks, node R's ranks being R*N ... R*N+N-1")
    parser.add_argument("--node-rank", type=int, default=0, metavar="R", help="this node's number, 0 ... K-1")
    parser.add_argument("--master", metavar="HOST:PORT",
                        help="with --nnodes > 1: where node 0's launcher serves the rendezvous (a TCP port every "
                             "node can reach)")
    parser.add_argument("--mpiexec", metavar="PATH",
                        help="the MPI launcher to use (default: mpiexec next to this Python, else on PATH)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS ...]",
                        help="the Python script to run in every rank and its arguments")


def run(args: argparse.Namespace) -> int:
    """Run `oarlock launch`; returns the exit status."""
    try:
        script, script_args = _check_args(args)
        mpiexec = find_mpiexec(args.mpiexec)
        extra = launcher_options(mpiexec)
    except LaunchError as exc:
        launcher_line(str(exc))
        return 2
    rendezvous = None
    if args.nnodes > 1 and args.node_rank == 0:
        try:
            rendezvous = nodes.Rendezvous(args.master)
        except OSError as exc:
            launcher_line(f"oarlock launch: cannot serve the rendezvous on --master {args.master}: {exc}")
            return 2
    try:
        return _run_restarts(args, mpiexec, extra, script, script_args)
    finally:
        if rendezvous is not None:
            rendezvous.close()


def _run_restarts(args, mpiexec: str, extra: list, script: str, script_args: list) -> int:
    """Run the job, and again after a failure while --max-restarts allows; returns the exit status."""
    nproc = args.nproc
    for restart in range(args.max_restarts + 1):
        status, job = _run_once(args, mpiexec, extra, nproc, restart, script, script_args)
        if status == 0 or job is None or job.signals or not job.monitor.failures:
            return status   # done, a launcher problem, a stop asked for by a signal, or mpiexec's own failure
        if restart == args.max_restarts:
            if args.max_restarts:
                launcher_line(f"oarlock launch: giving up after {args.max_restarts} restart(s)")
            return status
        nproc = restart_size(args.nproc, nproc, len(job.monitor.failures), args.min_nproc)
        if nproc is None:
            launcher_line(f"oarlock launch: not restarting: fewer than --min-nproc {args.min_nproc} ranks would be "
                          f"left")
            return status
        launcher_line(f"oarlock launch: restarting the job on {nproc} rank(s) (restart {restart + 1} of "
                      f"{args.max_restarts}, {RESTART_ENV}={restart + 1})")
    return status


def _run_once(args, mpiexec: str, extra: list, nproc: int, restart: int, script: str, script_args: list):
    """One mpiexec job of `nproc` ranks in a fresh launch directory; returns (exit status, the _Job or None)."""
    directory = tempfile.mkdtemp(prefix=failure.LAUNCH_DIR_PREFIX)
    try:
        command = [mpiexec, *extra, "-n", str(nproc), sys.executable, "-u", "-m", "oarlock_xccl.rank",
                   script, *script_args]
        env = _rank_environment(args, directory)
        if args.max_restarts:
            env[RESTART_ENV] = str(restart)
        peers = _Peers(args.master, args.node_rank, args.nnodes) if args.nnodes > 1 else None
        job = _Job(command, env, directory, nproc, args.grace, peers, rank_offset=args.node_rank * nproc)
        try:
            return job.run(), job
        except FifoError as exc:
            launcher_line(f"oarlock launch: cannot create the ranks' output FIFOs in {directory}: {exc.__cause__}; "
                          f"the launch directory comes from TMPDIR, which must be a local file system")
            return 1, None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def restart_size(nproc: int, current: int, failed: int, min_nproc: int | None) -> int | None:
    """How many ranks the next restart runs: `current` without --min-nproc (the failed ranks' places are
    taken again); with it, the ranks left once the `failed` ones are out, rounded down to a divisor of the
    original `nproc` (a global batch split over the ranks stays even), None when that is below `min_nproc`."""
    if min_nproc is None:
        return current
    left = max(current - failed, 0)
    size = max((n for n in range(1, left + 1) if nproc % n == 0), default=0)
    return size if size >= min_nproc else None


def _check_args(args) -> tuple[str, list[str]]:
    """Validate the parsed arguments; returns the script and its arguments."""
    command = list(args.command)
    if command[:1] == ["--"]:  # `oarlock launch -n 2 -- script.py ...`
        command = command[1:]
    if not command:
        raise LaunchError("oarlock launch: no script given; usage: oarlock launch -n N [options] SCRIPT [ARGS ...]")
    if args.nproc < 1:
        raise LaunchError(f"oarlock launch: -n/--nproc must be a number of ranks >= 1, got {args.nproc}")
    if args.timeout is not None and not args.timeout > 0:
        raise LaunchError(f"oarlock launch: --timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.max_restarts < 0:
        raise LaunchError(f"oarlock launch: --max-restarts must be a number of restarts >= 0, got {args.max_restarts}")
    if args.min_nproc is not None and not 1 <= args.min_nproc <= args.nproc:
        raise LaunchError(f"oarlock launch: --min-nproc must be a number of ranks in [1, -n {args.nproc}], got "
                          f"{args.min_nproc}")
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        raise LaunchError(f"oarlock launch: --nnodes must be >= 1 and --node-rank in [0, --nnodes), got --nnodes "
                          f"{args.nnodes} --node-rank {args.node_rank}")
    if args.nnodes > 1:
        if args.master is None:
            raise LaunchError(f"oarlock launch: --nnodes {args.nnodes} needs --master HOST:PORT (node 0's address)")
        try:
            nodes.parse_master(args.master, "oarlock launch --master")
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        if args.max_restarts:
            raise LaunchError("oarlock launch: --max-restarts works on one node only (--nnodes 1)")
    if not args.grace >= 0:
        raise LaunchError(f"oarlock launch: --grace must be a number of seconds >= 0, got {args.grace:g}")
    script = command[0]
    if not os.path.exists(script):
        where = "" if os.path.isabs(script) else f" in {os.getcwd()}"
        raise LaunchError(f"oarlock launch: script {script!r} not found{where}; expected the path of a Python "
                          f"script")
    return script, command[1:]


def _rank_environment(args, directory: str) -> dict[str, str]:
    env = dict(os.environ)
    env[failure.LAUNCH_DIR_ENV] = directory
    env[failure.LAUNCHER_ENV] = supervisor.launcher_identity()
    if args.backend != "auto":
        env[BACKEND_ENV] = args.backend
    if args.timeout is not None:
        env[TIMEOUT_ENV] = format(args.timeout, "g")
    if args.debug:
        env[DEBUG_ENV] = "1"
    if args.sdc_options or args.sdc_check:
        env[SDC_ENV] = args.sdc_options or "1"
    for names in world_announced():
        env.pop(names, None)   # the launcher is the one that starts the ranks now: MPI says rank and size
    if args.nnodes > 1:
        env.update({nodes.NNODES_ENV: str(args.nnodes), nodes.NODE_RANK_ENV: str(args.node_rank),
                    nodes.MASTER_ENV: args.master, nodes.NPROC_ENV: str(args.nproc)})
    return env


def world_announced() -> list[str]:
    """The rank and size variables of other launchers (Paddle's, Slurm's) that must not reach the ranks."""
    from oarlock_xccl.world import ANNOUNCED
    return [name for pair in ANNOUNCED for name in pair]


def find_mpiexec(explicit: str | None = None) -> str:
    """The MPI launcher: `explicit` if given, else mpiexec next to sys.executable, else on PATH.

    The one next to this Python comes first: it belongs to the MPI (e.g. the mpich wheel) that
    mpi4py in this environment uses, while PATH may hold another MPI's.
    """
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise LaunchError(f"oarlock launch: --mpiexec {explicit!r} is not an executable file")
        return found
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    for candidate in (beside_python, shutil.which("mpiexec")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise LaunchError(f"oarlock launch: no MPI launcher found: looked for mpiexec in {os.path.dirname(beside_python)}"
                      f" and on PATH; install one with `pip install mpich` (or give --mpiexec PATH)")


def launcher_options(mpiexec: str) -> list[str]:
    """Options the MPI launcher needs to start more ranks than there are cores.

    Hydra (MPICH) oversubscribes by itself; Open MPI refuses unless told --oversubscribe.
    """
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, errors="replace",
                                 timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []  # starting the job reports the problem with the right context
    text = version.stdout + version.stderr
    return ["--oversubscribe"] if "Open MPI" in text or "OpenRTE" in text else []


# -- ranks ------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Failure:
    """How one rank failed: `ending` completes "rank R ...", e.g. "was killed by SIGKILL (signal 9)"."""
    rank: int
    exit_code: int | None   # the launcher's exit status for it (128+N for signal N); None: the rank left no record
    ending: str
    time: float | None = None   # time.monotonic() of the failure when recorded: orders failures found together

    def describe(self) -> str:
        return f"rank {self.rank} {self.ending}"


VANISHED = ("ended without any record: the process mpiexec started for it was killed from outside (e.g. by "
            "SIGKILL; mpiexec's own message may say more)")


def exit_failure(rank: int, record: dict) -> Failure | None:
    """The failure an EXIT record (the wait status of a rank's script, see oarlock_xccl.supervisor) shows, if any:
    a signal or a non-zero exit code without an error record."""
    when = record.get("time") if isinstance(record.get("time"), (int, float)) else None
    signum, code = record.get("signal"), record.get("exit_code")
    if isinstance(signum, int):
        core = " (core dumped)" if record.get("core_dumped") else ""
        return Failure(rank, 128 + signum, f"was killed by {_signal_name(signum)} (signal {signum}){core}", when)
    if isinstance(code, int) and code != 0:
        return Failure(rank, code, f"exited with code {code} without an error record (os._exit or a C-level exit)",
                       when)
    return None


@dataclasses.dataclass
class _Rank:
    pid: int
    start: int | None
    sid: int
    ended: bool = False


class _RankMonitor:
    """Follows the ranks through their records in the launch directory and their pids."""

    def __init__(self, directory: str, nproc: int, rank_offset: int = 0):
        self.directory = directory
        self.nproc = nproc
        self.rank_offset = rank_offset   # a multi-node launch names the global rank: node rank * N + local
        self.ranks: dict[int, _Rank] = {}
        self.failures: list[Failure] = []

    def sessions(self) -> set[int]:
        return {rank.sid for rank in self.ranks.values()}

    def poll(self, detect_deaths: bool = True) -> list[Failure]:
        """Look for new failures; returns them in the order they happened (as far as recorded).

        An error record (the script raised) is always a failure. A death without one - an
        exit record with a signal or a non-zero code, or a rank gone without any record -
        counts only while no failure is known (and with detect_deaths): once one rank failed,
        MPI_Abort, mpiexec or the launcher end the others, and those deaths are consequences.
        Which ranks have ended is decided before the records are read: a rank writes its
        records before it exits, so a rank seen gone without one never wrote it.
        """
        names = set(os.listdir(self.directory))
        self._read_pid_records(names)
        ended = [number for number, rank in sorted(self.ranks.items())
                 if not rank.ended and not is_alive(rank.pid, rank.start)]
        for number in ended:
            self.ranks[number].ended = True
        names = set(os.listdir(self.directory))
        known = {item.rank - self.rank_offset for item in self.failures}
        failed = self._ranks_with(names, failure.FAILED)
        new = [record for record in map(self._read_failure, sorted(failed - known)) if record is not None]
        if detect_deaths and not self.failures:
            exited = self._ranks_with(names, failure.EXIT) - failed
            new += [record for record in map(self._read_exit, sorted(exited)) if record is not None]
            if not new:
                finished = exited | failed | self._ranks_with(names, failure.DONE)
                new = [Failure(number, None, VANISHED) for number in ended if number not in finished]
        if self.rank_offset:
            new = [dataclasses.replace(item, rank=item.rank + self.rank_offset) for item in new]
        new.sort(key=lambda item: (item.time is None, item.time or 0.0))
        self.failures.extend(new)
        return new

    def _ranks_with(self, names: set[str], kind: str) -> set[int]:
        return {rank for rank in range(self.nproc) if failure.file_name(rank, kind) in names}

    def _read_json(self, rank: int, kind: str) -> dict | None:
        try:
            with open(failure.launch_file(self.directory, rank, kind)) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _read_pid_records(self, names: set[str]) -> None:
        for number in sorted(self._ranks_with(names, failure.PID) - set(self.ranks)):
            data = self._read_json(number, failure.PID)
            if data is not None and isinstance(data.get("pid"), int):
                self.ranks[number] = _Rank(data["pid"], data.get("start"), int(data.get("sid") or 0))

    def _read_failure(self, rank: int) -> Failure | None:
        data = self._read_json(rank, failure.FAILED)
        if data is None:
            return None
        code = data.get("exit_code")
        code = code if isinstance(code, int) else None
        when = data.get("time") if isinstance(data.get("time"), (int, float)) else None
        summary = str(data.get("summary") or "no summary")
        return Failure(rank, code, f"failed (exit code {'unknown' if code is None else code}): {summary}", when)

    def _read_exit(self, rank: int) -> Failure | None:
        data = self._read_json(rank, failure.EXIT)
        return None if data is None else exit_failure(rank, data)


# -- the job -----------------------------------------------------------------------------------------------------------
class _Job:
    """One mpiexec run: start it, watch it, stop it, and say how it went."""

    def __init__(self, command: list[str], env: dict[str, str], directory: str, nproc: int, grace: float,
                 peers: _Peers | None = None, rank_offset: int = 0):
        self.command = command
        self.env = env
        self.grace = grace
        self.peers = peers          # the other nodes of a multi-node launch
        self.remote_failure: str | None = None
        self.pump = OutputPump(directory, nproc)
        if rank_offset:   # the prefixes show global ranks: this node's are rank_offset ... rank_offset + nproc - 1
            self.pump.fifos = [(rank + rank_offset, stream, path) for rank, stream, path in self.pump.fifos]
        self.monitor = _RankMonitor(directory, nproc, rank_offset)
        self.proc: subprocess.Popen | None = None
        self.signals: list[int] = []
        self.stopped = False   # the launcher ended the job (rather than mpiexec exiting by itself)

    def run(self) -> int:
        with _SignalForwarding(self.signals):
            self.pump.start()
            try:
                try:
                    # A session of its own: a Ctrl-C meant for the launcher does not hit mpiexec
                    # half-way; the launcher forwards it in order.
                    self.proc = subprocess.Popen(self.command, env=self.env, start_new_session=True)
                except OSError as exc:
                    launcher_line(f"oarlock launch: cannot start {self.command[0]}: {exc}")
                    return 127
                self._supervise()
            finally:
                if self.proc is not None:
                    self._shut_down()  # on every path, an error in the launcher included
                self.pump.close()
        return self._exit_status()

    def _supervise(self) -> None:
        """Wait for mpiexec to exit, a rank to fail (then --grace more seconds) or a signal to the launcher."""
        deadline = None
        while True:
            returncode = self.proc.poll()
            self._note(self.monitor.poll(), running=returncode is None)
            if returncode is not None or self.signals:
                break
            if self.monitor.failures and deadline is None:
                deadline = time.monotonic() + self.grace
            elif self.peers is not None and not self.monitor.failures:
                self.remote_failure = self.peers.failed_elsewhere()
                if self.remote_failure is not None:
                    launcher_line(f"oarlock launch: {self.remote_failure}; stopping this node's ranks")
                    break
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        if self.signals:
            name = signal.Signals(self.signals[0]).name
            launcher_line(f"oarlock launch: got {name}; stopping the job")

    def _note(self, failures: list[Failure], running: bool) -> None:
        """Announce the job's first failure (once)."""
        if not failures or failures[0] is not self.monitor.failures[0]:
            return
        first = failures[0]
        if self.peers is not None:   # the other nodes stop their ranks too
            self.peers.report(first.describe())
        tail = "; stopping the other ranks" if running else ""
        launcher_line(f"oarlock launch: {first.describe()}{tail}")
        if first.time is None and len(failures) > 1:
            # e.g. one rank killed by a signal, and mpiexec killing the others at once
            ranks = ", ".join(str(item.rank) for item in failures)
            launcher_line(f"oarlock launch: ranks {ranks} all ended without reporting within {POLL_S:g} s; which of "
                          f"them ended first is unknown (mpiexec's own message may name the process)")

    def _shut_down(self) -> None:
        """End every process of the job: SIGTERM, then SIGKILL what is left TERM_WAIT_S later.

        While mpiexec runs, SIGTERM goes to mpiexec (which forwards it through its proxies) and
        to the ranks' sessions (the ranks and their children), not to the proxies themselves:
        killing those first only makes mpiexec complain it cannot reach them. SIGKILL goes to
        everything. This also runs after mpiexec exited by itself, for what the ranks left behind.
        """
        self.stopped = self.proc.poll() is None
        targets: dict[int, ProcStat] = {}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            found = self._processes()  # collected before signalling: children are found through live parents
            if not found and self.proc.poll() is not None:
                break
            if not self.stopped and not targets:
                launcher_line(f"oarlock launch: ending {len(found)} process(es) the job left behind: "
                              f"{', '.join(map(str, sorted(found)))}")
            targets.update(found)
            direct = found
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, sig)  # not reaped yet, so the group id cannot have been reused
                except ProcessLookupError:
                    pass
                if sig == signal.SIGTERM:
                    sessions = self.monitor.sessions()
                    direct = {pid: stat for pid, stat in found.items() if stat.sid in sessions}
            for stat in direct.values():
                send_signal(stat, sig)
            if self._wait_gone(targets, TERM_WAIT_S):
                break
        self.proc.wait()
        # records written just before the end: by ranks that failed on their own while being stopped, or
        # (when mpiexec ended by itself) by any rank
        self._note(self.monitor.poll(detect_deaths=not self.stopped), running=False)

    def _remote_cause(self, failures: list[Failure]) -> str | None:
        """In a multi-node launch, the failure another node reported when it explains this node's: none of
        this node's ranks raised (their deaths follow, e.g. from MPI_Abort across the joined world)."""
        if self.peers is None or self.remote_failure is not None and not failures:
            return self.remote_failure
        if not failures or any(item.ending.startswith("failed") for item in failures):
            return None
        remote = self.peers.failed_elsewhere(wait=True)
        return remote if remote is not None and " failed (" in remote else None

    def _processes(self) -> dict[int, ProcStat]:
        root = self.proc.pid if self.proc.poll() is None else None
        return job_processes(root, self.monitor.sessions() | {self.proc.pid})

    def _wait_gone(self, targets: dict[int, ProcStat], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            alive = [stat.pid for stat in targets.values() if is_alive(stat.pid, stat.start)]
            if not alive and self.proc.poll() is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _exit_status(self) -> int:
        failures = self.monitor.failures
        remote = self._remote_cause(failures)
        if remote is not None:
            launcher_line(f"oarlock launch: the job failed on another node: {remote}; this node's ranks ended with "
                          f"it")
            return 1
        if failures:
            ranks = "; ".join(item.describe() for item in failures)
            launcher_line(f"oarlock launch: {len(failures)} of {self.monitor.nproc} rank(s) failed: {ranks}")
        if self.signals:
            return 128 + self.signals[0]
        if self.remote_failure is not None and not failures:
            return 1
        returncode = self.proc.returncode if self.proc is not None else None
        if failures:
            code = failures[0].exit_code
            if code is None:  # a vanished rank: mpiexec's status is the best guess when it ended by itself
                code = returncode if not self.stopped and returncode and returncode > 0 else 1
            return code or 1
        if returncode is None:
            return 127
        if returncode < 0:
            launcher_line(f"oarlock launch: mpiexec was killed by signal {_signal_name(-returncode)}")
            return 128 - returncode
        if returncode > 0:
            launcher_line(f"oarlock launch: mpiexec exited with status {returncode} without a rank reporting a "
                          f"failure")
        return returncode


class _Peers:
    """The other nodes of a multi-node launch, through the rendezvous: a failure here is announced there
    (key "abort/R"), and one announced there stops this node's ranks (looked up every PEER_POLL_S)."""

    def __init__(self, master: str, node_rank: int, nnodes: int):
        self.master, self.node_rank, self.nnodes = master, node_rank, nnodes
        self.next_look = 0.0

    def report(self, description: str) -> None:
        nodes.put(self.master, f"{nodes.ABORT_KEY}/{self.node_rank}", f"node {self.node_rank}: {description}")

    def failed_elsewhere(self, wait: bool = False) -> str | None:
        """Another node's failure, if one was reported (a rank's error before a mere death); wait=True asks
        now and gives the other launchers PEER_POLL_S to report (they notice a rank's record within POLL_S)."""
        now = time.monotonic()
        if wait:
            deadline = now + PEER_POLL_S
            while (reason := self._look()) is None and time.monotonic() < deadline:
                time.sleep(POLL_S)
            return reason
        if now < self.next_look:
            return None
        self.next_look = now + PEER_POLL_S
        return self._look()

    def _look(self) -> str | None:
        reasons = [reason for node in range(self.nnodes) if node != self.node_rank
                   and (reason := nodes.get(self.master, f"{nodes.ABORT_KEY}/{node}")) is not None]
        if not reasons:
            return None
        errors = [reason for reason in reasons if ": rank " in reason and " failed (" in reason]
        return f"{(errors or reasons)[0]} (reported by that node's launcher)"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class _SignalForwarding:
    """While active, SIGINT, SIGTERM and SIGHUP to the launcher are noted in `received` instead of ending it;
    the supervision loop then stops the job in order. Only the main thread may install handlers."""

    def __init__(self, received: list[int]):
        self.received = received
        self.previous: dict[int, object] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in _FORWARDED_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.received.append(signum)

    def __exit__(self, *exc_info):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False
