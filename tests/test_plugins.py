"""Plugin discovery: real pip-installed throwaway plugins, the disable switches, broken plugins,
hooks without a spec, duplicate registrations, and the `import oarlock` boundary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pluggy
import pytest

from oarlock import hookimpl
from oarlock.registry import Registry
from oarlock.device import Backend
from oarlock.plugins import PluginManager

DEMO_PLUGIN = '''
"""A third-party plugin: one op, oarlock.demo_double, with a generic kernel and a gradient."""
from oarlock import hookimpl


def _grad(ctx, g):
    return g * 2


@hookimpl
def oarlock_register_ops(ops):
    ops.define("demo_double(x: Tensor) -> Tensor", public=["demo_double", "Tensor.demo_double"], grad=_grad)
    ops.kernel("demo_double")(lambda xp, x: x * 2)
'''

BROKEN_PLUGIN = '''
raise ImportError("this plugin is broken on purpose")
'''


def _make_distribution(root, dist_name, module, source):
    pkg = root / dist_name
    (pkg / module).mkdir(parents=True)
    (pkg / module / "__init__.py").write_text(source)
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{dist_name}"
        version = "1.2.3"
        [project.entry-points."oarlock.plugins"]
        {module.split("_")[-1]} = "{module}"
        [tool.setuptools]
        packages = ["{module}"]
    '''))
    return pkg


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A directory holding two throwaway distributions installed by pip: a working and a broken plugin."""
    root = tmp_path_factory.mktemp("plugins")
    target = root / "site"
    for dist, module, source in (("oarlock-demo", "oarlock_demo", DEMO_PLUGIN),
                                 ("oarlock-broken", "oarlock_broken", BROKEN_PLUGIN)):
        pkg = _make_distribution(root, dist, module, source)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(pkg)], check=True, capture_output=True)
    return target


def _run(code, site=None, **env):
    environ = dict(os.environ, **env)
    if site is not None:
        environ["PYTHONPATH"] = str(site) + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=120)


def test_installed_plugin_is_discovered_and_its_op_works(site):
    result = _run('''
        import oarlock
        x = oarlock.to_tensor([1.0, 2.0], stop_gradient=False)
        y = oarlock.demo_double(x)
        y.sum().backward()
        print(y.tolist(), x.grad.tolist(), x.demo_double().tolist())
    ''', site)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[2.0, 4.0] [2.0, 2.0] [2.0, 4.0]"


def test_broken_plugin_is_reported_and_the_rest_load(site):
    result = _run("import oarlock; print(oarlock.to_tensor([1.0]).tolist())", site)
    assert result.returncode == 0, result.stderr
    assert "'broken' skipped" in result.stderr and "broken on purpose" in result.stderr
    listing = _run("from oarlock.cli import main; main(['plugins', '--json'])", site)
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    assert "broken on purpose" in rows["broken"]["error"]
    assert rows["demo"]["distribution"] == "oarlock-demo" and rows["demo"]["version"] == "1.2.3"
    assert rows["demo"]["hooks"] == ["oarlock_register_ops"] and rows["demo"]["kernels"] == 1
    assert rows["cpu"]["devices"] == ["cpu"]
    # oarlock-ops is one plugin per op family (plugins/ops/tests/test_families.py checks each one)
    assert rows["elementwise"]["distribution"] == "oarlock-ops" and rows["elementwise"]["kernels"] > 20
    assert "ops" not in rows


def test_disable_plugins_variable(site):
    result = _run('''
        import oarlock
        try:
            oarlock.demo_double
        except AttributeError as exc:
            print("missing:", exc)
    ''', site, OARLOCK_DISABLE_PLUGINS="demo,broken")
    assert result.returncode == 0, result.stderr
    assert "missing:" in result.stdout and "demo_double" in result.stdout
    assert "broken" not in result.stderr  # a blocked plugin is not even imported


def test_disable_autoload_variable(site):
    result = _run('''
        import oarlock
        try:
            oarlock.to_tensor([1.0])
        except AttributeError as exc:
            print("missing:", exc)
    ''', site, OARLOCK_DISABLE_PLUGIN_AUTOLOAD="1")
    assert result.returncode == 0, result.stderr
    assert "missing:" in result.stdout and "to_tensor" in result.stdout


def test_import_oarlock_loads_no_plugin_and_no_cupy():
    result = _run('''
        import sys
        import oarlock
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in
                        ("oarlock_cpu", "oarlock_ops", "oarlock_nn", "oarlock_io", "cupy", "mpi4py", "torch",
                         "paddle"))
        print(loaded)
    ''')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_plugins_load_on_first_use_not_on_import():
    result = _run('''
        import sys
        import oarlock
        oarlock.ones([2])
        print("oarlock_cpu" in sys.modules, "oarlock_ops" in sys.modules)
    ''')
    assert result.stdout.strip() == "True True", result.stderr


# -- isolated managers: no global state is touched ------------------------------------------------------------

def _isolated():
    return PluginManager(group="oarlock.no-such-group", environ={}).load()


class _Typo:
    @hookimpl
    def oarlock_register_opz(self, ops):  # misspelt hook: no spec
        pass


def test_hook_without_spec_fails_loudly():
    manager = _isolated()
    with pytest.raises(pluggy.PluginValidationError, match="oarlock_register_opz"):
        manager.register(_Typo(), "typo")
    assert not manager.pm.has_plugin("typo")


class _DefinesScale:
    @hookimpl
    def oarlock_register_ops(self, ops):
        ops.define("scale(x: Tensor) -> Tensor")
        ops.kernel("scale")(lambda xp, x: x * 3)


def test_duplicate_registration_names_both_plugins():
    manager = _isolated()
    manager.register(_DefinesScale(), "first")
    with pytest.warns(UserWarning, match="skipped"):
        manager.register(_DefinesScale(), "second")
    assert "'first'" in manager.failures["second"] and "'second'" in manager.failures["second"]


def test_disabled_name_is_not_registered_in_isolated_manager():
    manager = PluginManager(group="oarlock.no-such-group", environ={"OARLOCK_DISABLE_PLUGINS": "first"})
    assert manager.register(_DefinesScale(), "first") is None
    assert "scale" not in manager.registry.ops


class _Accelerator(Backend):
    def __init__(self, name, parent):
        self.type, self.parent = name, parent


def test_a_private_registry_leaves_the_process_places_alone():
    """Places are interned process-wide: a Registry made apart from the process's (a test's, a tool's) with its
    own "cpu" backend must not redirect the process's CPU tensors to it (it did: every later CPU op of the
    process then ran on that backend, whose xp is None, until something re-parsed "cpu")."""
    import oarlock
    oarlock.ones([1])                      # the process's registry exists
    before = oarlock.CPUPlace().backend
    registry = Registry()
    registry.add_backend(_Accelerator("cpu", None), "cpu")
    assert registry.parse_place("cpu") is oarlock.CPUPlace()
    assert oarlock.CPUPlace().backend is before and oarlock.device.default_place().backend.xp is np
    assert oarlock.to_tensor(np.ones(2, "float32")).tolist() == [1.0, 1.0]


def test_kernel_lookup_falls_back_from_device_to_parent_to_generic():
    registry = Registry()
    registry.add_backend(_Accelerator("gpu", None), "cuda")
    registry.add_backend(_Accelerator("metax_gpu", "gpu"), "metax")
    from oarlock.dtypes import float16, float32

    def kernel(tag):
        return lambda xp, x: tag

    registry.add_kernel("op", None, None, kernel("generic"), "ops")
    assert registry.find_kernel("op", "metax_gpu", float32)(np, 0) == "generic"
    registry.add_kernel("op", "gpu", None, kernel("gpu"), "cuda")
    assert registry.find_kernel("op", "metax_gpu", float32)(np, 0) == "gpu"  # the cache was cleared
    registry.add_kernel("op", "gpu", float16, kernel("gpu-fp16"), "cuda")
    assert registry.find_kernel("op", "metax_gpu", float16)(np, 0) == "gpu-fp16"
    registry.add_kernel("op", "metax_gpu", None, kernel("metax"), "metax")
    assert registry.find_kernel("op", "metax_gpu", float32)(np, 0) == "metax"
    assert registry.find_kernel("op", "gpu", float32)(np, 0) == "gpu"
    assert registry.find_kernel("other", "gpu", float32) is None
    assert sorted(registry.kernels_of("op")) == ["generic/any", "gpu/any", "gpu/float16", "metax_gpu/any"]


def test_custom_device_end_to_end():
    """A CUDA-like custom device registered by a plugin object reuses the generic kernels."""
    result = _run('''
        import numpy as np
        import oarlock
        from oarlock import hookimpl
        from oarlock.device import Backend
        from oarlock.plugins import register_plugin

        class Accel(Backend):
            type, parent, xp, array_types = "accel", "cpu", np, (np.ndarray,)
            def device_count(self): return 2
            def asarray(self, data, dtype=None, index=0): return np.asarray(data, dtype=dtype)
            def to_host(self, a): return np.asarray(a)

        class Plugin:
            @hookimpl
            def oarlock_register_backends(self, backends):
                backends.register(Accel())

        register_plugin(Plugin(), "accel")
        x = oarlock.to_tensor([1.0, 2.0], place="accel:1", stop_gradient=False)
        y = (x * x).sum()
        y.backward()
        print(y.place, x.grad.place, x.grad.tolist())
        print(oarlock.device.get_all_custom_device_type(), oarlock.device.get_available_custom_device())
        print(oarlock.device.is_compiled_with_custom_device("accel"))
        try:
            x + oarlock.to_tensor([1.0, 2.0])
        except ValueError as exc:
            print("error:", exc)
        print(x.to("cpu").place, x.cpu().to("accel:0").place)
        try:
            oarlock.to_tensor([1.0], place="accel:5")
        except ValueError as exc:
            print("error:", exc)
    ''')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "accel:1 accel:1 [2.0, 4.0]"
    assert lines[1] == "['accel'] ['accel:0', 'accel:1']"
    assert lines[2] == "True"
    assert "oarlock.add()" in lines[3] and "accel:1" in lines[3] and "cpu" in lines[3]
    assert lines[4] == "cpu accel:0"
    assert "index 5" in lines[5] and "2 accel" in lines[5]
