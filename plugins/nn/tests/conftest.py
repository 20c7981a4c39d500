"""Fixtures of the oarlock-nn tests: the optional oracles `torch` and `paddle` (a test that asks for one
skips cleanly when it is not installed), and the workspace's shared test helpers on sys.path: the op
table's float64 references (`op_specs.optim`, which the optimizer tests reuse for the update ops of the
"optimizer_update" family) and `errors.raises_naming`."""

from __future__ import annotations

import os
import sys
import warnings

import pytest

_SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir, "tests")
sys.path.insert(0, os.path.normpath(_SHARED))


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def paddle():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # paddle's import-time notices
        return pytest.importorskip("paddle")
