"""The import boundaries: pyproject.toml's [tool.importlinter] section is what tools/boundaries.py generates
from the pyprojects, and its contracts can fail. lint-imports runs on a scratch copy of the sources
(core and every plugin): unmodified, every contract is kept; with a plugin importing a private core
module, a plugin importing a plugin it does not declare, or the core importing a plugin, the contract
concerned is broken and the offending import is named."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = "boundary_probe"


def _load_boundaries():
    spec = importlib.util.spec_from_file_location("oarlock_tools_boundaries", ROOT / "tools" / "boundaries.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module            # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


boundaries = _load_boundaries()


def _lint_imports() -> str:
    pytest.importorskip("importlinter", reason="import-linter is not installed (pip install -r requirements-dev.txt)")
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if not found:
        pytest.skip("the lint-imports command is not on PATH")
    return found


def test_section_is_generated_from_the_pyprojects():
    """A new cross-plugin dependency is declared in the plugin's pyproject.toml and the section regenerated."""
    text = (ROOT / "pyproject.toml").read_text()
    _, committed, _ = boundaries._split(text, ROOT / "pyproject.toml")
    generated = boundaries.render(boundaries.contracts(boundaries.workspace()))
    assert committed == generated, "pyproject.toml's import boundaries are stale: python tools/boundaries.py --write"


def test_ci_runs_the_readme_test_command_and_nothing_else():
    """.ci/run is the README's test command (item 8 of issue 14): a broken README cannot hide behind CI."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0].splitlines()
    readme_command = next(block[i + 1].strip() for i, line in enumerate(block) if line.strip().startswith("# tests"))
    script = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in script if line and not line.startswith("#")]
    assert commands[-1] == readme_command
    assert all(line.startswith(("set ", "cd ")) for line in commands[:-1]), commands   # nothing installed first
    assert "-r requirements-oracles.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()


def test_every_plugin_has_a_dependency_contract():
    table = boundaries.contracts(boundaries.workspace())
    ids = {c["id"] for c in table["contracts"]}
    for dist in boundaries.workspace().values():
        if dist.name != boundaries.CORE:
            assert f"deps-{dist.packages[0]}" in ids
    assert {"core-imports-no-plugin", "no-private-core-imports"} <= ids
    assert set(table["root_packages"]) >= {"oarlock", "oarlock_cpu", "oarlock_ops", "oarlock_nn", "oarlock_io",
                                           "oarlock_train", "oarlock_checkpoint", "oarlock_flashmask",
                                           "oarlock_xccl", "oarlock_cuda"}


# -- the contracts on a scratch copy ---------------------------------------------------------------------------

@pytest.fixture
def scratch(tmp_path):
    """A copy of the workspace's pyprojects and Python sources (core/, plugins/*/). .run() regenerates the
    contracts from the copy, as `python tools/boundaries.py --write` would, lints the copy and returns
    (exit status, output, {contract id: "KEPT" | "BROKEN"})."""
    lint = _lint_imports()
    for dist in boundaries.workspace().values():
        folder = tmp_path / dist.path.relative_to(ROOT)
        folder.mkdir(parents=True)
        shutil.copyfile(dist.path / "pyproject.toml", folder / "pyproject.toml")
        for package in dist.packages:
            origin = dist.path / "src" / package
            for path in origin.rglob("*.py"):
                if "__pycache__" not in path.parts:
                    target = folder / "src" / package / path.relative_to(origin)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)

    class Scratch:
        root = tmp_path

        def workspace(self):
            return boundaries.workspace(tmp_path)

        def section(self):
            return boundaries.render(boundaries.contracts(self.workspace()))

        def write(self, module: str, text: str):
            """Write the module `module` (dotted name; its packages are created) into the copy."""
            package, *rest = module.split(".")
            dist = next(d for d in self.workspace().values() if package in d.packages)
            path = dist.path / "src" / package
            for part in rest[:-1]:
                path = path / part
                path.mkdir(exist_ok=True)
                (path / "__init__.py").touch()
            (path / f"{rest[-1]}.py").write_text(text)

        def run(self):
            dists = self.workspace()
            table = boundaries.contracts(dists)
            (tmp_path / "lint.toml").write_text(boundaries.render(table))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "OARLOCK"))}
            env.update(PYTHONPATH=os.pathsep.join(str(d.path / "src") for d in dists.values()),
                       COLUMNS="1000", NO_COLOR="1")
            done = subprocess.run([lint, "--no-cache", "--config", str(tmp_path / "lint.toml")], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=120)
            out = re.sub(r"\s+", " ", done.stdout + done.stderr)
            assert "Analyzed" in out, out
            status = {}
            for contract in table["contracts"]:
                found = re.search(re.escape(contract["name"]) + r" (KEPT|BROKEN)", out)
                assert found, f"lint-imports did not report the contract {contract['name']!r}:\n{out}"
                status[contract["id"]] = found.group(1)
            return done.returncode, out, status

    return Scratch()


def test_unmodified_copy_keeps_every_contract(scratch):
    code, out, status = scratch.run()
    assert code == 0 and set(status.values()) == {"KEPT"}, out


def test_plugin_importing_a_private_core_module_breaks_the_contract(scratch):
    plugin = next(p for d in scratch.workspace().values() if d.name != boundaries.CORE for p in d.packages)
    existing = boundaries.private_modules(scratch.workspace()[boundaries.CORE])
    before = scratch.section()
    # new private modules, at the top and deeper down: they make the committed section stale (so the
    # test above fails until it is regenerated), and the regenerated contract covers them
    scratch.write("oarlock._probe_private", "VALUE = 1\n")
    scratch.write("oarlock.probe_public._inner", "VALUE = 2\n")
    assert scratch.section() != before
    lines = ["from oarlock._probe_private import VALUE", "from oarlock.probe_public._inner import VALUE as V2"]
    if existing:                                       # one the core has today (oarlock._tensor, ...)
        lines.append(f"import {existing[-1]}")
    scratch.write(f"{plugin}.{PROBE}", "\n".join(lines) + "\n")
    code, out, status = scratch.run()
    assert code != 0 and status["no-private-core-imports"] == "BROKEN", out
    assert f"{plugin}.{PROBE} -> oarlock._probe_private" in out
    assert f"{plugin}.{PROBE} -> oarlock.probe_public._inner" in out
    if existing:
        assert f"{plugin}.{PROBE} -> {existing[-1]}" in out
    assert [cid for cid, s in status.items() if s == "BROKEN"] == ["no-private-core-imports"], out


def _undeclared_pair(dists):
    plugins = [d for d in dists.values() if d.name != boundaries.CORE]
    pairs = [(a, b) for a in plugins for b in plugins if a is not b and b.name not in a.declared()]
    preferred = [(a, b) for a, b in pairs if (a.name, b.name) == ("oarlock-checkpoint", "oarlock-xccl")]
    return (preferred or pairs)[0]


def test_undeclared_cross_plugin_import_breaks_the_contract(scratch):
    dists = scratch.workspace()
    importer, imported = _undeclared_pair(dists)
    scratch.write(f"{importer.packages[0]}.{PROBE}", f"import {imported.packages[0]}\n")
    # a declared one in another plugin stays allowed
    declaring = next((d for d in dists.values() if d.name not in (importer.name, boundaries.CORE)
                      and any(n in dists and n != boundaries.CORE for n in d.declared())), None)
    if declaring is not None:
        dep = next(n for n in sorted(declaring.declared()) if n in dists and n != boundaries.CORE)
        scratch.write(f"{declaring.packages[0]}.{PROBE}", f"import {dists[dep].packages[0]}\n")
    code, out, status = scratch.run()
    contract = f"deps-{importer.packages[0]}"
    assert code != 0 and status[contract] == "BROKEN", out
    assert f"{importer.packages[0]}.{PROBE} -> {imported.packages[0]}" in out
    assert [cid for cid, s in status.items() if s == "BROKEN"] == [contract], out


def test_core_importing_a_plugin_breaks_the_contract(scratch):
    plugin = next(p for d in scratch.workspace().values() if d.name != boundaries.CORE for p in d.packages)
    scratch.write(f"oarlock.{PROBE}", f"import {plugin}\n")
    code, out, status = scratch.run()
    assert code != 0 and status["core-imports-no-plugin"] == "BROKEN", out
    assert f"oarlock.{PROBE} -> {plugin}" in out
