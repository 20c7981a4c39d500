"""Run bench scripts from a checkout that is not pip-installed (the GPU machine): oarlock's core and plugins
go on sys.path (and PYTHONPATH, for subprocesses), and the plugins' entry points are declared through a
temporary .dist-info, so the plugin manager finds them as if the workspace were installed."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _workspace_entry_points() -> dict:
    import tomllib
    found = {}
    for pyproject in [ROOT / "core" / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]:
        data = tomllib.loads(pyproject.read_text())
        found.update(data.get("project", {}).get("entry-points", {}).get("oarlock.plugins", {}))
    return found


def bootstrap() -> str:
    """Make oarlock and its plugins importable from this checkout when they are not installed."""
    from importlib.metadata import entry_points
    installed = {ep.name for ep in entry_points(group="oarlock.plugins")}
    try:
        wanted = _workspace_entry_points()
    except ImportError:  # Python < 3.11: no tomllib; rely on the installed workspace
        return "installed workspace (no tomllib to read the checkout's entry points)"
    missing = {name: target for name, target in wanted.items() if name not in installed}
    if not missing and importlib.util.find_spec("oarlock") is not None:
        return "installed workspace"
    site = Path(tempfile.mkdtemp(prefix="oarlock-site-"))
    dist = site / "oarlock_gpu_check-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: oarlock-gpu-check\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text(
        "[oarlock.plugins]\n" + "".join(f"{name} = {target}\n" for name, target in sorted(missing.items())))
    paths = [str(site), str(ROOT / "core" / "src"), *[str(p) for p in sorted((ROOT / "plugins").glob("*/src"))]]
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return f"checkout {ROOT}, not installed: {len(missing)} plugin entry points from {dist}"
