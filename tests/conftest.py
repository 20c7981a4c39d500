"""Shared fixtures: the op-spec table is importable as `op_specs`."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
