"""Each workspace distribution installs and imports alone, with only its declared dependencies
(tools/check_plugin_isolation.py): its wheel and what pip resolves for it go into an empty directory on top
of a bare venv; every module of its packages imports there, and oarlock's plugin manager loads the entry
points with no failure. This catches an undeclared plugin or third-party dependency, a module-level import
of an extra's package, and a file missing from a wheel.

The wheels are built and the third-party wheels fetched once per session (about 15-25 s), then the distributions are
checked together, one per core, a few seconds each. A distribution whose dependencies cannot be fetched here is
skipped, with pip's reason. OARLOCK_SKIP_ISOLATION=1 skips the whole module."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("OARLOCK_SKIP_ISOLATION", "") not in ("", "0"):
    pytest.skip("OARLOCK_SKIP_ISOLATION is set", allow_module_level=True)


def _load(name):
    sys.path.insert(0, str(ROOT / "tools"))        # check_plugin_isolation imports boundaries from there
    try:
        spec = importlib.util.spec_from_file_location(f"oarlock_tools_{name}", ROOT / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "tools"))


isolation = _load("check_plugin_isolation")
DISTRIBUTIONS = list(isolation.boundaries.workspace())


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    if importlib.util.find_spec("venv") is None:
        pytest.skip("this Python has no venv module")
    if importlib.util.find_spec("pip") is None:
        pytest.skip("this Python has no pip")
    iso = isolation.Isolation(tmp_path_factory.mktemp("isolation"), log=lambda line: None)
    try:
        iso.prepare()
    except RuntimeError as exc:
        pytest.skip(f"cannot make a bare venv here: {exc}")
    return iso


@pytest.fixture(scope="module")
def results(checker):
    """Every distribution's check, run together (one worker per core) the first time a test asks."""
    return checker.check_all(DISTRIBUTIONS)


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_installs_and_imports_alone(checker, results, name):
    result = results[name]
    if result.status == "skipped":
        pytest.skip(f"{name}: {result.reason}")
    assert result.status == "ok", f"{name} alone, with its declared dependencies:\n{result.reason}"
    # exactly the workspace distributions it declares (transitively) were installed
    expected = sorted(isolation.closure(checker.dists, name))
    assert sorted(isolation.boundaries.normalize(n) for n in result.installed) == expected
