"""Fixtures every test folder of the workspace shares (tests/ and each plugin's tests/): the optional
oracles `torch` and `paddle`, which skip the test cleanly when the framework is not installed."""

import warnings

import pytest


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def paddle():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # paddle's import-time notices
        return pytest.importorskip("paddle")
