"""Install each workspace distribution alone, with only what its pyproject.toml declares, and import it.

For every distribution (the core and each plugin) this installs, into an empty directory used on top of
a bare venv (no system site-packages, no pip), exactly what pip resolves for it: its wheel, the
workspace distributions it declares (their wheels, not the checkout) and their third-party
dependencies, no extras. Then, in that environment, it imports every module of the distribution's
packages (`__main__` excepted) and loads the entry-point group through oarlock's plugin manager,
which must record no failure and must have registered the entry points of the distribution and its
dependencies. An import of an undeclared plugin or third-party package fails here, as does a module
that imports an extra's package at module level (extras must be imported lazily), or a missing file
in a wheel.

    python tools/check_plugin_isolation.py                 every distribution
    python tools/check_plugin_isolation.py oarlock-ops     some (distribution or import names)
    python tools/check_plugin_isolation.py --workdir DIR --keep

Cost: wheels are built once from a copy of the sources (the checkout is not written to), third-party wheels are
fetched once into the same wheelhouse (pip's index and cache, as configured), then each install is offline from the
wheelhouse (`--no-index --no-compile`): a second or two per distribution. The builds and the checks run on one
worker per core (each is a pip or python subprocess, mostly waiting on its own process), so the whole run takes
about half as long on 2 cores. A distribution whose third-party dependencies cannot be fetched here is reported as
skipped, with pip's reason. tests/test_plugin_isolation.py runs this.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import boundaries  # noqa: E402

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
COPY_IGNORE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.so", "*.pyc", "tests",
                                     ".pytest_cache", ".hypothesis", ".ruff_cache")

# Runs inside the isolated environment: argv = [packages (comma-separated), expected entry points (comma-separated)]
CHECK = r"""
import importlib, importlib.metadata, json, pkgutil, sys, traceback, warnings
packages, expected = (a.split(",") if a else [] for a in sys.argv[1:3])
report = {"modules": 0, "module_errors": {}, "failures": {}, "missing_entry_points": [], "installed": []}
for package in packages:
    try:
        module = importlib.import_module(package)
    except Exception as exc:
        report["module_errors"][package] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        continue
    report["modules"] += 1
    def onerror(name):
        report["module_errors"][name] = "".join(traceback.format_exception_only(*sys.exc_info()[:2])).strip()
    for info in pkgutil.walk_packages(module.__path__, package + ".", onerror=onerror):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
            report["modules"] += 1
        except Exception as exc:
            report["module_errors"][info.name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
import oarlock.plugins
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    manager = oarlock.plugins.default_manager()
report["failures"] = dict(manager.failures)
loaded = {name for name, plugin in manager.pm.list_name_plugin() if plugin is not None}
report["missing_entry_points"] = sorted(set(expected) - loaded)
report["installed"] = sorted(d.metadata["Name"] for d in importlib.metadata.distributions())
print("ISOLATION-REPORT " + json.dumps(report))
"""


@dataclass
class Result:
    name: str
    status: str                     # "ok", "failed", "skipped"
    reason: str = ""
    seconds: float = 0.0
    installed: list[str] = field(default_factory=list)
    modules: int = 0

    def line(self) -> str:
        head = f"{self.name:20s} {self.status:7s} {self.seconds:5.1f} s"
        if self.status == "ok":
            return f"{head}  {self.modules} modules; installed: {', '.join(self.installed)}"
        return f"{head}  {self.reason}"


WORKERS = max(1, min(4, os.cpu_count() or 1))   # concurrent pip / python subprocesses


def _map(fn, items) -> list:
    """[fn(item) for item in items], WORKERS at a time (fn runs subprocesses: threads suffice)."""
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(fn, items))


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def _tail(done: subprocess.CompletedProcess, lines: int = 6) -> str:
    text = [line for line in (done.stdout + done.stderr).splitlines()
            if line.strip() and not line.startswith("WARNING: Running pip as")]
    return "\n".join(text[-lines:])


def _build_requirements_met(dists) -> bool:
    """True when this interpreter already has every build requirement (then wheels build without isolation,
    which saves creating a build environment per distribution)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return False
    for dist in dists:
        project = boundaries.tomllib.loads((dist.path / "pyproject.toml").read_text())
        for raw in project.get("build-system", {}).get("requires", []):
            requirement = Requirement(raw)
            try:
                version = importlib.metadata.version(requirement.name)
            except importlib.metadata.PackageNotFoundError:
                return False
            if not requirement.specifier.contains(version, prereleases=True):
                return False
    return True


def closure(dists: dict, name: str) -> list[str]:
    """`name` and the workspace distributions it requires, transitively (extras left out)."""
    seen, todo = [], [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.append(current)
        todo += [n for n in dists[current].requires if n in dists]
    return seen


class Isolation:
    """The shared part (wheelhouse, bare venv) and one check per distribution."""

    def __init__(self, workdir: Path, root: Path = boundaries.ROOT, log=print):
        self.workdir = Path(workdir)
        self.root = root
        self.log = log
        self.dists = boundaries.workspace(root)
        self.wheelhouse = self.workdir / "wheelhouse"
        self.venv = self.workdir / "venv"
        self.unavailable: dict[str, str] = {}     # distribution -> why it cannot be installed here
        self.prepared = False
        self.prepare_seconds = 0.0

    @property
    def python(self) -> Path:
        return self.venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    def prepare(self):
        """Build every workspace wheel and fetch the third-party wheels they need; make the bare venv."""
        if self.prepared:
            return
        start = time.perf_counter()
        self.wheelhouse.mkdir(parents=True, exist_ok=True)
        sources = self.workdir / "src"
        folders = {}
        for dist in self.dists.values():
            folders[dist.name] = sources / dist.path.name
            shutil.copytree(dist.path, folders[dist.name], ignore=COPY_IGNORE, dirs_exist_ok=True)
        flags = ["--no-build-isolation"] if _build_requirements_met(self.dists.values()) else []

        def build(names):
            return _run(PIP + ["wheel", "-q", "--no-deps", *flags, "-w", str(self.wheelhouse),
                               *(str(folders[n]) for n in names)])
        shares = [list(folders)[i::WORKERS] for i in range(WORKERS)]
        if any(done.returncode for done in _map(build, [s for s in shares if s])):   # one by one: which ones fail
            for name, one in zip(folders, _map(build, [[n] for n in folders])):
                if one.returncode:
                    self.unavailable[name] = f"its wheel does not build here:\n{_tail(one)}"
        self.log(f"built the workspace wheels ({time.perf_counter() - start:.1f} s)")
        buildable = [n for n in self.dists if n not in self.unavailable]
        fetch = _run(PIP + ["download", "-q", "-d", str(self.wheelhouse), "--find-links", str(self.wheelhouse),
                            *buildable])
        if fetch.returncode:     # fetch per distribution to learn which ones cannot be satisfied
            for name in buildable:
                one = _run(PIP + ["download", "-q", "-d", str(self.wheelhouse), "--find-links",
                                  str(self.wheelhouse), name])
                if one.returncode:
                    self.unavailable[name] = f"its dependencies cannot be fetched here:\n{_tail(one)}"
        self.log(f"fetched the third-party wheels ({time.perf_counter() - start:.1f} s)")
        done = _run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)])
        if done.returncode:
            raise RuntimeError(f"python -m venv failed:\n{_tail(done)}")
        self.prepared = True
        self.prepare_seconds = time.perf_counter() - start

    def check_all(self, names) -> dict[str, Result]:
        """check() of every name, WORKERS at a time; {name: Result} in the order given."""
        self.prepare()
        return dict(zip(names, _map(self.check, list(names))))

    def check(self, name: str) -> Result:
        self.prepare()
        start = time.perf_counter()
        dist = self.dists[name]
        blocked = [n for n in closure(self.dists, name) if n in self.unavailable]
        if blocked:
            return Result(name, "skipped", "; ".join(f"{n}: {self.unavailable[n]}" for n in blocked))
        site = self.workdir / "site" / name
        shutil.rmtree(site, ignore_errors=True)
        done = _run(PIP + ["install", "-q", "--no-index", "--find-links", str(self.wheelhouse), "--no-compile",
                           "--no-warn-conflicts", "--no-warn-script-location", "--target", str(site), name])
        if done.returncode:
            return Result(name, "failed", f"pip could not install it with its declared dependencies:\n{_tail(done)}",
                          time.perf_counter() - start)
        expected = [ep for n in closure(self.dists, name) for ep in self.dists[n].entry_points]
        empty = self.workdir / "cwd"
        empty.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTHON", "OARLOCK", "VIRTUAL_ENV", "PIP_"))}
        env["PYTHONPATH"] = str(site)
        done = _run([str(self.python), "-s", "-c", CHECK, ",".join(dist.packages), ",".join(expected)],
                    cwd=empty, env=env, timeout=300)
        seconds = time.perf_counter() - start
        match = re.search(r"^ISOLATION-REPORT (.*)$", done.stdout, re.M)
        if done.returncode or not match:
            return Result(name, "failed", f"the check did not finish (exit {done.returncode}):\n{_tail(done, 12)}",
                          seconds)
        report = json.loads(match.group(1))
        ours = sorted(d for d in report["installed"] if boundaries.normalize(d) in self.dists)
        problems = [f"import of {module} failed: {error}" for module, error in report["module_errors"].items()]
        problems += [f"plugin {plugin!r} failed to load: {error}" for plugin, error in report["failures"].items()]
        problems += [f"entry point {ep!r} was not registered" for ep in report["missing_entry_points"]]
        return Result(name, "failed" if problems else "ok", "\n".join(problems), seconds, ours, report["modules"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="distribution or import names (default: all)")
    parser.add_argument("--workdir", type=Path, help="where to build (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="oarlock-isolation-"))
    start = time.perf_counter()
    try:
        iso = Isolation(workdir)
        by_package = {p: d.name for d in iso.dists.values() for p in d.packages}
        names = [by_package.get(n, boundaries.normalize(n)) for n in args.names] or list(iso.dists)
        unknown = [n for n in names if n not in iso.dists]
        if unknown:
            parser.error(f"not a workspace distribution: {', '.join(unknown)} (known: {', '.join(iso.dists)})")
        results = list(iso.check_all(names).values())
        for result in results:
            print(result.line(), flush=True)
        print(f"{sum(r.status == 'ok' for r in results)} ok, {sum(r.status == 'failed' for r in results)} failed, "
              f"{sum(r.status == 'skipped' for r in results)} skipped in {time.perf_counter() - start:.1f} s "
              f"(shared preparation {iso.prepare_seconds:.1f} s)")
        return 1 if any(r.status == "failed" for r in results) else 0
    finally:
        if args.keep:
            print(f"kept {workdir}")
        elif not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
