"""Fixtures every test folder of the workspace shares (tests/ and each plugin's tests/): the optional
oracles `torch` and `paddle`, which skip the test cleanly when the framework is not installed, and
`install_example`, which pip-installs one of examples/plugins/ into a directory of its own."""

import shutil
import subprocess
import sys
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


@pytest.fixture(scope="session")
def install_example(tmp_path_factory):
    """install(path) -> a directory (for sys.path) holding the example distribution at `path`, installed by pip
    without its dependencies from a copy (pip builds in the source tree)."""
    def install(example):
        root = tmp_path_factory.mktemp(example.name)
        source, target = root / "src", root / "site"
        shutil.copytree(example, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                               "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"pip install {example.name} failed:\n{done.stderr}"
        return target
    return install
