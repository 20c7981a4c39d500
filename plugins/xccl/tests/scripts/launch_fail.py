"""Helper for test_launch: `launch_fail.py MARKER MODE RANK`. Rank RANK fails as MODE says while the others
wait; MARKER (also in the command line of a child every rank starts) lets the test find leftover processes.

MODE: raise (ValueError, others in MPI Barrier), raise-sleeping (ValueError, others sleep without MPI),
exit (sys.exit(2)), os_exit (os._exit(3)), sigkill (the rank SIGKILLs itself), sigsegv (a real segmentation
fault through ctypes), none (every rank sleeps: the test stops the launcher or mpiexec).
"""

import ctypes
import os
import resource
import signal
import subprocess
import sys
import time

marker, mode, failing = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
# A child in the rank's session that would outlive the rank: the launcher must end it too.
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker])
if mode == "raise":
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
print(f"ready {rank}", flush=True)
if rank == failing and mode != "none":
    time.sleep(0.3)  # let the others reach their wait
    if mode.startswith("raise"):
        raise ValueError(f"boom on rank {rank}")
    if mode == "exit":
        sys.exit(2)
    if mode == "os_exit":
        os._exit(3)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "sigsegv":
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # no core file
        ctypes.string_at(0)  # reads address 0
if mode == "raise":
    MPI.COMM_WORLD.Barrier()
time.sleep(120)
