"""Helper for test_launch: every rank reports its rank, size, arguments and launch environment on stdout,
writes to stderr from Python, from the fd and from a child process, and ends stdout with a line that has no
newline."""

import json
import os
import subprocess
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"hello rank={comm.rank} size={comm.size} args={json.dumps(sys.argv[1:])}")
environment = {name: os.environ.get(name) for name in ("OARLOCK_LAUNCH_DIR", "OARLOCK_COMM_BACKEND",
                                                      "OARLOCK_COLLECTIVE_TIMEOUT")}
print(f"environment {json.dumps(environment)}")
print(f"to stderr from rank {comm.rank}", file=sys.stderr)
sys.stderr.flush()
os.write(2, f"fd-level from rank {comm.rank}\n".encode())
subprocess.run([sys.executable, "-c", f"print('child of rank {comm.rank}')"], check=True)
comm.Barrier()
sys.stdout.write(f"partial line of rank {comm.rank}")
