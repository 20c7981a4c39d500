"""Shared fixtures: the op-spec table is importable as `op_specs`, and the optional oracles
(`torch`, `paddle`) are fixtures that skip the test cleanly when the framework is not installed."""

import os
import sys
import warnings

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def paddle():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # paddle's import-time notices
        return pytest.importorskip("paddle")
