"""Shared setup for the hapi tests: this folder goes on sys.path so the tests import mnist_like (the generated
data set) and paddle_twin (running the same program on real Paddle 3.2 and on oarlock)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
