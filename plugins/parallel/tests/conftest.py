"""plugins/parallel's tests: parallel_jobs.py (importable from these tests: this folder is put on sys.path)
loads and launches the MPI job scripts of scripts/."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
