"""Namespaces come from plugins: a pip-installed test plugin (tests/data/namespace_plugin) creates
oarlock.incubate.nn.functional and oarlock.distributed.fleet.meta_parallel with no core change; the registry's
namespace rules; ops as callables and the op library oarlock.ops.<plugin>; no public name starts with "_";
a name whose plugin is disabled says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import oarlock
from oarlock.dispatch import OpRegistrar
from oarlock.plugins import PluginManager
from oarlock.registry import (OP_LIBRARY, ApiRegistrar, DuplicateRegistration, NamespaceConflict, Registry,
                              default_registry, is_op_library, library_name, private_allowed)

DATA = Path(__file__).resolve().parent / "data" / "namespace_plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """tests/data/namespace_plugin installed by pip into a fresh target directory (a copy is built, so the
    build leaves nothing in the source tree)."""
    root = tmp_path_factory.mktemp("nsplugin")
    source = root / "src"
    shutil.copytree(DATA, source)
    target = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(source)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def _run(code, site, **env):
    # the demo plugin's oarlock.distributed.fleet and oarlock.incubate stand in for oarlock-parallel's and
    # oarlock-incubate's, which would clash with them
    environ = dict(os.environ, **{"OARLOCK_DISABLE_PLUGINS": "parallel,paddle_incubate", **env})
    environ["PYTHONPATH"] = str(site) + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=300)


def test_a_plugin_creates_importable_namespaces(site):
    result = _run('''
        import sys
        import oarlock
        assert "oarlock_nsdemo" not in sys.modules and "oarlock_ops" not in sys.modules, "import oarlock loaded plugins"
        import oarlock.incubate.nn.functional as F
        x = oarlock.to_tensor([[1.0, -2.0, 3.0, 0.5]])
        fmt = lambda t: [f"{v:.4f}" for v in t.numpy().ravel().tolist()]
        print("swiglu", fmt(F.swiglu(x)))
        print("same", oarlock.incubate.nn.functional.swiglu is F.swiglu,
              sys.modules["oarlock.incubate.nn.functional"] is F)
        print("twice", fmt(F.swiglu_twice(x)))
        from oarlock.distributed.fleet import meta_parallel
        print("meta_parallel", meta_parallel.__name__, meta_parallel.PipelineLayer([1, 2]).layers)
        from oarlock.distributed import fleet
        print("fleet", fleet.init(), sorted(n for n in dir(fleet) if not n.startswith("_")))
        print("dir", "incubate" in dir(oarlock), "fleet" in dir(oarlock.distributed),
              [n for n in dir(oarlock.incubate) if not n.startswith("_")],
              [n for n in dir(F) if not n.startswith("_")])
        print("doc", oarlock.incubate.__doc__)
        print("method", x.nsdemo_double().tolist(), oarlock.ops.nsdemo.nsdemo_twice(x).tolist())
        print("layer", oarlock.incubate.nn.Scale(2.0)(x).tolist(),
              [n for n in dir(oarlock.incubate.nn) if not n.startswith("_")])
        import oarlock.distributed.launch  # the real module of the real package still imports
        for bad in ("oarlock.incubate.nothing", "oarlock.nothing.at_all"):
            try:
                __import__(bad)
            except ModuleNotFoundError as exc:
                print("missing module", bad, "|", exc)
        try:
            F.nothing
        except AttributeError as exc:
            print("missing name |", exc)
    ''', site)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == "swiglu ['2.1932', '-0.1192']"   # silu([1, -2]) * [3, 0.5]
    assert out[1] == "same True True"
    assert out[2] == "twice ['4.3864', '-0.2384']"
    assert out[3] == "meta_parallel oarlock.distributed.fleet.meta_parallel [1, 2]"
    assert out[4] == "fleet fleet initialised ['init', 'meta_parallel']"
    assert out[5] == "dir True True ['nn'] ['swiglu', 'swiglu_twice']"
    assert out[6] == "doc oarlock.incubate: incubating APIs (from the nsdemo test plugin)."
    assert out[7] == "method [[2.0, -4.0, 6.0, 1.0]] [[2.0, -4.0, 6.0, 1.0]]"
    assert out[8] == "layer [[2.0, -4.0, 6.0, 1.0]] ['Scale', 'functional']"
    assert out[9].startswith("missing module oarlock.incubate.nothing |")
    assert out[10].startswith("missing module oarlock.nothing.at_all |")
    assert "no installed plugin exports oarlock.incubate.nn.functional.nothing" in out[11]
    assert "PluginLoadWarning" not in result.stderr, result.stderr


def test_a_plugin_module_that_uses_other_plugins_names_at_its_top_imports_first(site):
    """oarlock_nsdemo.layers subclasses oarlock.nn.Layer at its top. Imported first, it loads the plugins; the
    nsdemo entry point waits for the import to finish (its package is half imported), then registers."""
    result = _run('''
        from oarlock_nsdemo.layers import Scale
        import oarlock
        from oarlock.plugins import default_manager
        manager = default_manager()
        print(Scale(3.0)(oarlock.to_tensor([1.0, 2.0])).tolist(), sorted(manager.deferred))
        print(oarlock.incubate.nn.functional.swiglu is not None, manager.pm.has_plugin("nsdemo"),
              sorted(manager.failures), sorted(manager.deferred))
    ''', site)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[3.0, 6.0] []", "True True [] []"], result.stdout + result.stderr


def test_the_plugin_module_imported_first_still_works(site):
    """Importing the plugin's own module first (it imports oarlock.incubate.nn at its top) must not load the
    plugins half-way through that import: the namespace module is served provisionally."""
    result = _run('''
        import oarlock_nsdemo
        import oarlock
        print(f"{oarlock_nsdemo.swiglu_twice(oarlock.to_tensor([1.0, 3.0])).item():.4f}")
        from oarlock.plugins import default_manager
        print(sorted(default_manager().failures), sorted(default_manager().deferred))
    ''', site)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["4.3864", "[] []"], result.stdout + result.stderr


def test_disabled_plugin_is_named_for_its_names_namespaces_and_methods(site):
    result = _run('''
        import oarlock
        x = oarlock.to_tensor([1.0])
        for what, get in (("module", lambda: __import__("oarlock.incubate.nn.functional")),
                          ("attribute", lambda: oarlock.incubate),
                          ("child", lambda: oarlock.distributed.fleet),
                          ("method", lambda: x.nsdemo_double)):
            try:
                get()
            except (AttributeError, ImportError) as exc:
                print(what, type(exc).__name__, "|", exc)
    ''', site, OARLOCK_DISABLE_PLUGINS="nsdemo,parallel,paddle_incubate")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" |")[0] for line in lines] == ["module ModuleNotFoundError", "attribute AttributeError",
                                                      "child AttributeError", "method AttributeError"], result.stdout
    for line, what in zip(lines, ("oarlock.incubate", "oarlock.incubate", "oarlock.distributed.fleet",
                                  "Tensor.nsdemo_double")):   # the import stops at the first missing parent
        assert f"{what} is provided by plugin 'nsdemo', which is disabled by OARLOCK_DISABLE_PLUGINS" in line, line


def test_an_op_the_core_needs_names_its_disabled_plugin():
    """`x + y` needs oarlock.add: with the plugin that exports it disabled, the error says so."""
    provider = default_registry().api["oarlock"]["add"][1]
    result = subprocess.run([sys.executable, "-c", textwrap.dedent('''
        import oarlock
        x = oarlock.Tensor([1.0])
        try:
            x + x
        except NotImplementedError as exc:
            print(exc)
    ''')], capture_output=True, text=True, env=dict(os.environ, OARLOCK_DISABLE_PLUGINS=provider), timeout=300)
    assert result.returncode == 0, result.stderr
    assert (f"oarlock.add is provided by plugin {provider!r}, which is disabled by OARLOCK_DISABLE_PLUGINS"
            in result.stdout), result.stdout + result.stderr


def test_disabled_provider_with_an_isolated_manager(tmp_path, monkeypatch):
    """A throwaway entry-point group (a dist-info directory on sys.path): the blocked plugin is found by name."""
    (tmp_path / "ghost_plugin.py").write_text(textwrap.dedent('''
        from oarlock import hookimpl

        @hookimpl
        def oarlock_register_api(api):
            api.export("oarlock.ghostly", "thing", 42)
    '''))
    info = tmp_path / "ghost_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[oarlock.test-ghost]\nghost = ghost_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    blocked = PluginManager(group="oarlock.test-ghost", environ={"OARLOCK_DISABLE_PLUGINS": "ghost"}).load()
    assert "ghostly" not in blocked.registry.children("oarlock")
    assert blocked.disabled_provider("oarlock.ghostly", "thing") == "ghost"
    assert blocked.disabled_provider("oarlock.ghostly") == "ghost"
    assert blocked.disabled_provider("oarlock.ghostly", "other") is None
    assert blocked.disabled_provider("oarlock", "ghostly") == "ghost"   # the child namespace, by attribute
    free = PluginManager(group="oarlock.test-ghost", environ={}).load()
    assert free.registry.api["oarlock.ghostly"]["thing"] == (42, "ghost")
    assert free.disabled_provider("oarlock.ghostly", "thing") is None


# -- the registry's namespace rules ----------------------------------------------------------------------------

def test_exporting_creates_the_namespace_and_those_above_it():
    reg = Registry()
    api = ApiRegistrar(reg, "p")
    assert not reg.has_namespace("oarlock.incubate")
    api.export("oarlock.incubate.nn.functional", "swiglu", len)
    assert all(reg.has_namespace(ns) for ns in ("oarlock.incubate", "oarlock.incubate.nn",
                                                 "oarlock.incubate.nn.functional"))
    assert reg.children("oarlock") == ["incubate"] and reg.children("oarlock.incubate.nn") == ["functional"]
    assert "oarlock.incubate" not in reg.api and dict(reg.api["oarlock.incubate"]) == {}   # read, not created
    assert "oarlock.incubate" not in reg.api
    assert reg.namespace_owner("oarlock.incubate") == "p"
    api.namespace("oarlock.profiler", doc="the profiler")
    assert reg.has_namespace("oarlock.profiler") and reg.namespace_docs["oarlock.profiler"] == "the profiler"
    with pytest.raises(DuplicateRegistration, match="docstring of namespace oarlock.profiler.*'p'.*'q'"):
        ApiRegistrar(reg, "q").namespace("oarlock.profiler", doc="again")


@pytest.mark.parametrize("namespace", ["torch.nn", "oarlock..nn", "oarlock.1x", "oarlock.class", "oarlock.nn-x",
                                       "oarlock._private", "Oarlock.nn", ""])
def test_malformed_namespaces_are_refused(namespace):
    with pytest.raises(ValueError, match="namespace"):
        ApiRegistrar(Registry(), "p").export(namespace, "f", len)


def test_private_and_op_library_names_are_refused():
    api = ApiRegistrar(Registry(), "p")
    with pytest.raises(ValueError, match="oarlock.nn.functional._helper: names starting with '_' are private"):
        api.export("oarlock.nn.functional", "_helper", len)
    with pytest.raises(ValueError, match="Tensor._helper: names starting with '_' are private"):
        api.export("Tensor", "_helper", len)
    with pytest.raises(ValueError, match="op library"):
        api.export("oarlock.ops.p", "f", len)
    with pytest.raises(ValueError, match="identifier"):
        api.export("oarlock", "not-a-name", len)


def test_a_name_and_a_child_namespace_cannot_share_a_spelling():
    reg = Registry()
    ApiRegistrar(reg, "first").export("oarlock.distributed.fleet", "init", len)
    with pytest.raises(NamespaceConflict, match="'second' exported the name oarlock.distributed.fleet, but "
                                                "oarlock.distributed.fleet is already a namespace, created by "
                                                "plugin 'first'"):
        ApiRegistrar(reg, "second").export("oarlock.distributed", "fleet", len)
    ApiRegistrar(reg, "first").export("oarlock", "profiler", len)
    with pytest.raises(NamespaceConflict, match="'second' creates namespace oarlock.profiler.*already a name, "
                                                "exported by plugin 'first'"):
        ApiRegistrar(reg, "second").export("oarlock.profiler.utils", "f", len)
    ApiRegistrar(reg, "first").export("Tensor", "T", property(len))   # Tensor methods have no children


# -- ops as callables and the op library --------------------------------------------------------------------

def test_define_returns_the_callable_and_fills_the_op_library():
    reg = Registry()
    ops = OpRegistrar(reg, "my-plugin")
    double = ops.define("nsd_double(x: Tensor) -> Tensor", public=["nsd_double", "Tensor.nsd_double"])
    helper = ops.define("nsd_helper(x: Tensor) -> Tensor", internal=True)
    assert callable(double) and double.opdef is reg.ops["nsd_double"] and helper.opdef is reg.ops["nsd_helper"]
    library = f"{OP_LIBRARY}.my_plugin"
    assert library_name("my-plugin") == "my_plugin" and library_name("2d") == "p2d"
    assert library_name("import") == "import_"
    assert reg.api[library] == {"nsd_double": (double, "my-plugin"), "nsd_helper": (helper, "my-plugin")}
    assert reg.api["oarlock"]["nsd_double"][0] is double and reg.api["Tensor"]["nsd_double"][0] is double
    assert not any("nsd_helper" in names for ns, names in reg.public_api().items())
    assert helper.opdef.display == f"{library}.nsd_helper" and helper.__module__ == library
    assert helper.opdef.public == ()
    with pytest.raises(ValueError, match="internal op has no public names"):
        ops.define("nsd_bad(x: Tensor) -> Tensor", internal=True, public=["nsd_bad"])
    shown = ops.define("nsd_shown(x: Tensor) -> Tensor", internal=True, display="oarlock.nsd_wrapper")
    assert shown.opdef.display == "oarlock.nsd_wrapper"


def test_no_public_namespace_holds_a_private_name():
    """Only Paddle's private compatibility names (registry.PADDLE_PRIVATE_NAMES) may start with '_'."""
    registry = default_registry()
    oarlock.add   # noqa: B018  (loads the plugins)
    qualified = [f"{ns}.{name}" for ns, names in registry.api.items() if not is_op_library(ns) for name in names]
    private = sorted(q for q in qualified if not private_allowed(q))
    assert not private, f"public names starting with '_' outside registry.PADDLE_PRIVATE_NAMES: {private}"
    assert any(q.startswith("oarlock._C_ops.") for q in qualified)   # the allow-list is in use, not vacuous


def test_private_names_outside_the_allow_list_are_refused():
    reg = Registry()
    api = ApiRegistrar(reg, "my-plugin")
    with pytest.raises(ValueError, match="names starting with '_' are private"):
        api.export("oarlock", "_helper", 1)
    with pytest.raises(ValueError, match="namespaces are public"):
        api.export("oarlock._private", "name", 1)
    with pytest.raises(ValueError, match="names starting with '_' are private"):
        api.export("Tensor", "_secret", 1)
    api.export("oarlock._C_ops", "matmul", 1)            # Paddle's: allowed
    api.export("oarlock.framework", "_current_expected_place", 2)
    assert reg.api["oarlock._C_ops"]["matmul"][0] == 1
    assert private_allowed("Tensor._md5sum") and not private_allowed("Tensor._data")
    assert not private_allowed("oarlock._C_ops._hidden") and not private_allowed("oarlock._C_opsx.y")


def test_every_op_is_in_the_op_library():
    registry = default_registry()
    for name, op in registry.ops.items():
        library = getattr(oarlock.ops, library_name(op.plugin))
        fn = getattr(library, name)
        assert fn.opdef is op, name
        for qualified in op.public:   # the public spelling is the same callable
            namespace, _, public = qualified.rpartition(".")
            assert registry.api[namespace][public][0] is fn, qualified
    for name in ("sort", "topk", "median", "silu_grad", "_norm_svd_grad", "flashmask_attention_op",
                 "flashmask_attention_grad"):   # internal ops: in the library only
        if name in registry.ops:
            assert registry.ops[name].public == (), name


def test_internal_ops_are_gone_from_the_public_namespaces():
    for namespace, name in (("oarlock", "_sort"), ("oarlock", "_topk"), ("oarlock.linalg", "_norm_svd_grad"),
                            ("oarlock.nn.functional", "_flashmask_attention_grad")):
        module = sys.modules.get(namespace) or __import__(namespace, fromlist=["_"])
        assert not hasattr(module, name), f"{namespace}.{name}"
