"""Shared setup for the vision tests: this folder goes on sys.path so the tests import paddle_sources (Paddle's
own model sources run on oarlock, and the same-weights comparison) and image_files (small local data sets);
the workspace's tests folder too, for errors.raises_naming."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, os.pardir, "tests")))
