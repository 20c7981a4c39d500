"""`oarlock launch`: real MPI jobs of 2 and 4 ranks started through mpiexec.

Checked: rank-prefixed and complete output on the right stream, untouched script
arguments, the ranks' environment, and the failure paths (an exception, sys.exit,
os._exit, SIGKILL, a segmentation fault, Ctrl-C to the launcher, a launcher that
cannot start any rank): the launcher names the failed rank and how it ended, ends
within a bounded time and leaves no process of the job behind. A SIGKILLed
launcher, and a plain mpiexec job whose mpiexec and proxy are SIGKILLed, leave no
process behind either: the ranks end themselves. Leftovers are found through an
environment marker that every process of the job inherits (Hydra's proxy
included). Every job costs about half a second of mpiexec start-up, so the
failure cases use a short --grace and the helper scripts live in tests/scripts.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

pytest.importorskip("mpi4py")

from oarlock_xccl import launch  # noqa: E402 - only once mpi4py is known to be there
from oarlock_xccl.processes import read_proc_stat  # noqa: E402

try:
    launch.find_mpiexec()
except launch.LaunchError as exc:
    pytest.skip(f"no MPI launcher: {exc}", allow_module_level=True)

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
HELLO = os.path.join(SCRIPTS, "launch_hello.py")
FAIL = os.path.join(SCRIPTS, "launch_fail.py")
OARLOCK_LAUNCH = [sys.executable, "-m", "oarlock.cli", "launch"]
TIMEOUT_S = 60   # a hanging launcher fails the test instead of the run
MARKER_ENV = "OARLOCK_TEST_JOB"   # inherited by every process of a test's job, Hydra's proxy included
GONE_WITHIN_S = 10   # how long a job whose launcher was SIGKILLed may take to disappear


def environment(marker: str | None = None) -> dict:
    """The test process's environment without launcher variables a surrounding job might have set, plus the
    job's marker."""
    env = dict(os.environ)
    for name in ("OARLOCK_LAUNCH_DIR", "OARLOCK_LAUNCHER", launch.BACKEND_ENV, launch.TIMEOUT_ENV):
        env.pop(name, None)
    if marker is not None:
        env[MARKER_ENV] = marker
    return env


def new_marker() -> str:
    return f"oarlock-launch-test-{uuid.uuid4().hex}"


def run_launch(*args, command=OARLOCK_LAUNCH, marker=None):
    """Run the launcher to its end; returns (CompletedProcess, seconds taken)."""
    started = time.monotonic()
    done = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=environment(marker), stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


def _proc_text(pid: str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def leftovers(marker: str) -> list[str]:
    """Live processes whose command line or environment holds `marker`, as "pid: command line" (a zombie has
    an empty command line and environment)."""
    if not os.path.isdir("/proc"):
        table = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
        return [row for row in table.splitlines() if marker in row and "Z" not in row.split()[1]]
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        cmdline = _proc_text(pid, "cmdline")
        if marker in cmdline or f"{MARKER_ENV}={marker}" in _proc_text(pid, "environ"):
            found.append(f"{pid}: {cmdline}")
    return found


def leftovers_after(marker: str, seconds: float) -> list[str]:
    """The job's live processes once they are all gone or `seconds` have passed; kills what is left, so a
    failing test does not leave sleeping ranks to the tests after it."""
    deadline = time.monotonic() + seconds
    while (found := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for row in found:
        try:
            os.kill(int(row.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass
    return found


@contextlib.contextmanager
def sleeping_job(command: list[str], marker: str, size: int = 2):
    """A job of `size` ranks that sleep (launch_fail.py's mode none), yielded as its Popen once every rank
    runs; on exit the launching process is killed and waited for and its pipes are closed."""
    proc = _start_sleeping_job(command, marker, size)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(TIMEOUT_S)
        proc.stdout.close()
        proc.stderr.close()


def _start_sleeping_job(command: list[str], marker: str, size: int) -> subprocess.Popen:
    proc = subprocess.Popen([*command, "-n", str(size), *_RANK_PREFIX.get(command[0], []), FAIL, marker, "none",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(marker),
                            stdin=subprocess.DEVNULL)
    watchdog = threading.Timer(TIMEOUT_S, proc.kill)
    watchdog.start()
    seen = ""   # plain mpiexec may interleave the ranks' writes ("ready 0ready 1\n\n"): look for the words
    try:
        while not all(f"ready {rank}" in seen for rank in range(size)) and (line := proc.stdout.readline()):
            seen += line
    finally:
        watchdog.cancel()
    assert all(f"ready {rank}" in seen for rank in range(size)), seen
    return proc


# plain mpiexec runs the rank wrapper itself; `oarlock launch` adds it
_RANK_PREFIX = {launch.find_mpiexec(): [sys.executable, "-u", "-m", "oarlock_xccl.rank"]}


def lines(text: str) -> list[str]:
    return text.splitlines()


def hello_lines(stdout: str, size: int, args: list[str]) -> None:
    for rank in range(size):
        assert f"[rank {rank}] hello rank={rank} size={size} args={json.dumps(args)}" in lines(stdout)
        assert f"[rank {rank}] child of rank {rank}" in lines(stdout)
        assert f"[rank {rank}] partial line of rank {rank}" in lines(stdout)


def rank_environment(stdout: str, rank: int) -> dict:
    prefix = f"[rank {rank}] environment "
    return json.loads(next(line for line in lines(stdout) if line.startswith(prefix))[len(prefix):])


# -- jobs that succeed -------------------------------------------------------------------------------------------------
HELLO_ARGS = ["--foo", "-n", "3", "--", "a b"]


@pytest.fixture(scope="module")
def two_ranks():
    """One 2-rank job shared by the output tests."""
    done, _ = run_launch("-n", 2, "--backend", "mpi", "--timeout", 30, HELLO, *HELLO_ARGS)
    return done


def test_two_ranks_print_every_line_with_their_rank(two_ranks):
    assert two_ranks.returncode == 0, two_ranks.stderr
    hello_lines(two_ranks.stdout, 2, HELLO_ARGS)  # also: C-level output of a child and a last line without newline
    # everything the ranks write is prefixed; nothing is lost or doubled
    rank_lines = [line for line in lines(two_ranks.stdout) if line.startswith("[rank ")]
    assert len(rank_lines) == 2 * 4 and len(set(rank_lines)) == 8


def test_stderr_lines_are_prefixed_and_stay_on_stderr(two_ranks):
    for rank in range(2):
        assert f"[rank {rank}] to stderr from rank {rank}" in lines(two_ranks.stderr)
        assert f"[rank {rank}] fd-level from rank {rank}" in lines(two_ranks.stderr)
        assert f"[rank {rank}] to stderr from rank {rank}" not in lines(two_ranks.stdout)
    assert "hello" not in two_ranks.stderr


def test_ranks_get_the_launch_environment_and_the_directory_is_removed(two_ranks):
    first, second = rank_environment(two_ranks.stdout, 0), rank_environment(two_ranks.stdout, 1)
    assert first == second
    assert first["OARLOCK_COMM_BACKEND"] == "mpi" and first["OARLOCK_COLLECTIVE_TIMEOUT"] == "30"
    assert first["OARLOCK_LAUNCH_DIR"] and not os.path.exists(first["OARLOCK_LAUNCH_DIR"])


def test_four_ranks_oversubscribe_two_cores():
    done, _ = run_launch("-n", 4, HELLO)
    assert done.returncode == 0, done.stderr
    hello_lines(done.stdout, 4, [])
    # --backend auto and no --timeout: the variables are not set
    assert rank_environment(done.stdout, 3)["OARLOCK_COMM_BACKEND"] is None
    assert rank_environment(done.stdout, 3)["OARLOCK_COLLECTIVE_TIMEOUT"] is None


def test_python_m_oarlock_distributed_launch_is_the_same_command():
    done, _ = run_launch("-n", 2, HELLO, "--x", command=[sys.executable, "-m", "oarlock.distributed.launch"])
    assert done.returncode == 0, done.stderr
    hello_lines(done.stdout, 2, ["--x"])


# -- jobs that fail ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, size, failing, code, ending", [
    # the others wait in MPI_Barrier: MPI_Abort ends them
    ("raise", 2, 1, 1, "failed (exit code 1): ValueError: boom on rank 1"),
    # the others sleep outside MPI: the launcher ends them
    ("raise-sleeping", 3, 1, 1, "failed (exit code 1): ValueError: boom on rank 1"),
    ("exit", 2, 1, 2, "failed (exit code 2): SystemExit: 2"),
    ("os_exit", 3, 1, 3, "exited with code 3 without an error record (os._exit or a C-level exit)"),
    ("sigkill", 2, 0, 128 + 9, "was killed by SIGKILL (signal 9)"),
    ("sigsegv", 2, 1, 128 + 11, "was killed by SIGSEGV (signal 11)"),
])
def test_a_failing_rank_ends_the_job_and_is_named_with_its_cause(mode, size, failing, code, ending):
    marker = new_marker()
    done, seconds = run_launch("-n", size, "--grace", 0.5, FAIL, marker, mode, failing, marker=marker)
    assert seconds < 50  # the other ranks would sleep for 120 s (generous: CI load varies)
    assert leftovers_after(marker, 0) == []  # ranks, their children, mpiexec and its proxy are all gone
    assert done.returncode == code, done.stderr
    what = f"rank {failing} {ending}"
    assert f"oarlock launch: {what}" in done.stderr
    assert f"oarlock launch: 1 of {size} rank(s) failed: {what}" in lines(done.stderr)
    if mode.startswith("raise"):
        assert f"[rank {failing}] Traceback (most recent call last):" in lines(done.stderr)
        assert "oarlock_xccl" not in done.stderr.split("Traceback", 1)[1].split("ValueError")[0]  # the script's frames


def test_ctrl_c_to_the_launcher_stops_the_job():
    marker = new_marker()
    with sleeping_job(OARLOCK_LAUNCH, marker) as proc:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 130, stderr
    assert "oarlock launch: got SIGINT; stopping the job" in stderr
    assert "failed" not in stderr  # ranks the launcher stopped are not failures
    assert leftovers_after(marker, 0) == []


def test_sigkill_of_the_launcher_ends_every_process_of_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the launcher makes its launch directory
    marker = new_marker()
    with sleeping_job(OARLOCK_LAUNCH, marker) as proc:
        # mpiexec, its proxy, and per rank the wrapper, the script and the script's child
        assert len(leftovers(marker)) >= 2 + 3 * 2
        proc.kill()
        proc.wait(TIMEOUT_S)
        assert leftovers_after(marker, GONE_WITHIN_S) == []
    assert list(tmp_path.iterdir()) == []  # the ranks removed the launch directory the launcher could not


def test_ranks_of_plain_mpiexec_end_when_mpiexec_and_its_proxy_are_killed():
    # e.g. by the OOM killer or `kill -9` of the job's Hydra processes: nothing is left to stop the ranks
    marker = new_marker()
    mpiexec = launch.find_mpiexec()
    with sleeping_job([mpiexec], marker) as proc:
        hydra = [int(row.split(":")[0]) for row in leftovers(marker) if "hydra_pmi_proxy" in row or
                 row.split(": ", 1)[1].split()[0] == mpiexec]
        assert len(hydra) >= 2, leftovers(marker)
        for pid in hydra:
            os.kill(pid, signal.SIGKILL)
        proc.wait(TIMEOUT_S)
        assert leftovers_after(marker, GONE_WITHIN_S) == []


def rank_processes(marker: str) -> dict[int, int]:
    """The live rank wrapper processes of the job (supervisors and the scripts they run) as {pid: parent pid}."""
    wrapper = f"{sys.executable} -u -m oarlock_xccl.rank "  # not mpiexec's command line, which also holds it
    stats = (read_proc_stat(int(row.split(":")[0])) for row in leftovers(marker)
             if row.split(": ", 1)[1].startswith(wrapper))
    return {stat.pid: stat.ppid for stat in stats if stat is not None and stat.state != "Z"}


def test_the_script_of_a_rank_dies_with_the_process_mpiexec_started():
    # Hydra's clean-up SIGKILLs the process it started, which is the rank's supervisor: the script it runs
    # must not live on as an orphan
    marker = new_marker()
    with sleeping_job([launch.find_mpiexec()], marker):
        try:
            ranks = rank_processes(marker)
            supervisors = [pid for pid, parent in ranks.items() if parent not in ranks]  # the scripts' parents
            assert len(ranks) == 4 and len(supervisors) == 2, leftovers(marker)
            os.kill(supervisors[0], signal.SIGKILL)
            deadline = time.monotonic() + GONE_WITHIN_S
            while rank_processes(marker) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert rank_processes(marker) == {}
        finally:
            # the scripts' own children are left: Hydra ends only the processes it started, and waits for the
            # children's end of its output pipes
            leftovers_after(marker, 0)


@pytest.mark.parametrize("record, ending, code", [
    ({"signal": 11, "core_dumped": True, "time": 1.5}, "was killed by SIGSEGV (signal 11) (core dumped)", 139),
    ({"signal": 15, "exit_code": None}, "was killed by SIGTERM (signal 15)", 143),
    ({"exit_code": 255, "signal": None}, "exited with code 255 without an error record (os._exit or a C-level exit)",
     255),
])
def test_exit_records_name_the_cause(record, ending, code):
    found = launch.exit_failure(3, record)
    assert (found.describe(), found.exit_code) == (f"rank 3 {ending}", code)


def test_a_zero_exit_record_is_no_failure():
    assert launch.exit_failure(0, {"exit_code": 0, "signal": None}) is None


# -- the launcher's own errors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["-n", "2", "no_such_script.py"], "script 'no_such_script.py' not found"),
    (["-n", "0", HELLO], "-n/--nproc must be a number of ranks >= 1, got 0"),
    (["-n", "2"], "no script given"),
    (["-n", "2", "--timeout", "-1", HELLO], "--timeout must be a positive number of seconds, got -1"),
    (["-n", "2", "--mpiexec", "/no/such/mpiexec", HELLO], "--mpiexec '/no/such/mpiexec' is not an executable file"),
])
def test_bad_arguments_are_reported_without_starting_a_job(args, message):
    done, _ = run_launch(*args)
    assert done.returncode == 2
    assert f"oarlock launch: {message}" in done.stderr
    assert done.stdout == "" and "[rank" not in done.stderr     # no rank ran (not timed: CI load varies)


@pytest.mark.skipif(shutil.which("false") is None, reason="needs the `false` command")
def test_a_launcher_that_starts_no_rank_does_not_hang():
    # the output threads wait in open() for ranks that never come; the launcher must release them
    done, seconds = run_launch("-n", 2, "--mpiexec", shutil.which("false"), HELLO)
    assert done.returncode == 1
    assert "oarlock launch: mpiexec exited with status 1 without a rank reporting a failure" in done.stderr
    assert seconds < 50   # a hang would reach TIMEOUT_S; generous, as CI load varies


def test_help_lists_the_options_and_the_environment():
    done, _ = run_launch("--help")
    assert done.returncode == 0
    for text in ("-n N", "--backend", "--timeout", "--grace", "--mpiexec", "OARLOCK_LAUNCH_DIR",
                 "OARLOCK_COMM_BACKEND", "OARLOCK_COLLECTIVE_TIMEOUT"):
        assert text in done.stdout
