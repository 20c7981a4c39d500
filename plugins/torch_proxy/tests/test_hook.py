"""The import hook: scoped imports (module level, submodules, lazy imports in functions, `from torch import`
forms) get the façade while a real torch in the same process stays real; scope=None; disable restores the
modules set aside; bad scopes and missing torch names are reported."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import numpy as np
import oarlock
import pytest
from oarlock.compat import disable_torch_proxy, enable_torch_proxy, torch_proxy, torch_proxy_enabled


def _write_package(root, name):
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        import torch.nn.functional as F
        from . import sub

        def lazy_torch():
            import torch as t
            return t
    """))
    (pkg / "sub.py").write_text("import torch.optim\nfrom torch.utils.data import DataLoader\n")
    return pkg


@pytest.fixture()
def packages(tmp_path):
    _write_package(tmp_path, "scopedlib")
    (tmp_path / "outsidelib.py").write_text("import torch\n")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.split(".")[0] in ("scopedlib", "outsidelib")]:
        del sys.modules[name]


def test_scope_gives_facade_inside_and_real_torch_outside(packages, torch):
    import oarlock_torch_proxy.facade as facade
    with torch_proxy(scope={"scopedlib"}):
        lib = importlib.import_module("scopedlib")
        outside = importlib.import_module("outsidelib")
        import torch as here   # this test module is outside the scope
    assert lib.torch is facade and lib.nn is facade.nn and lib.F is facade.nn.functional
    assert lib.sub.torch is facade and lib.sub.DataLoader is facade.utils.data.DataLoader
    assert lib.lazy_torch() is facade   # a function keeps its module's import: lazy imports too
    assert outside.torch is torch and here is torch and sys.modules["torch"] is torch
    # the real torch still works next to the façade, and a façade tensor is an oarlock Tensor
    assert float(torch.ones(3).sum()) == 3.0
    x = lib.torch.ones(2, 3)
    assert isinstance(x, oarlock.Tensor) and x.shape == [2, 3] and x.size == 6   # this module is oarlock code
    assert not torch_proxy_enabled()


def test_modules_set_aside_come_back(packages, torch):
    real_lib = importlib.import_module("scopedlib")
    assert real_lib.torch is torch
    with torch_proxy(scope={"scopedlib"}):
        proxied = importlib.import_module("scopedlib")
        assert sys.modules["scopedlib"] is proxied
    assert proxied is not real_lib and proxied.torch is not torch
    assert sys.modules["scopedlib"] is real_lib and sys.modules["scopedlib.sub"] is real_lib.sub


def test_scope_none_serves_every_import(packages, torch):
    import oarlock_torch_proxy.facade as facade
    enable_torch_proxy()
    try:
        outside = importlib.import_module("outsidelib")
        assert sys.modules["torch"] is facade and outside.torch is facade
        assert importlib.import_module("torch.nn.functional") is facade.nn.functional
    finally:
        disable_torch_proxy()
    assert sys.modules["torch"] is torch and sys.modules["torch.nn"] is torch.nn


def test_enable_checks_its_scope():
    with pytest.raises(TypeError, match=r"enable_torch_proxy\(\): argument 'scope' must be None or a set"):
        enable_torch_proxy(scope=3)
    with pytest.raises(ValueError, match=r"enable_torch_proxy\(\): argument 'scope' must hold top-level module"):
        enable_torch_proxy(scope={"not a module"})
    with torch_proxy(scope={"a"}):
        with pytest.raises(RuntimeError, match=r"already on with scope \['a'\]"):
            enable_torch_proxy(scope={"b"})
    assert not torch_proxy_enabled()


def test_missing_torch_names_raise_not_implemented(torch_code):
    """Never a silent stand-in: the exact torch name and the caller's file:line are in the message, and the
    error is still an AttributeError / ImportError for feature probes."""
    facade = torch_code.torch
    line = sys._getframe().f_lineno + 2
    with pytest.raises(NotImplementedError, match=rf"torch\.fft\.rfft2 is not implemented .*test_hook\.py:{line}"):
        facade.fft.rfft2(facade.ones(4, 4))
    with pytest.raises(NotImplementedError, match=r"torch\.nn\.functional\.ctc_loss is not implemented"):
        _ = facade.nn.functional.ctc_loss
    with pytest.raises(NotImplementedError, match=r"torch\.Tensor\.cauchy_ is not implemented .*proxytorchcode"):
        torch_code.call(facade.ones(2), "cauchy_")
    with pytest.raises(NotImplementedError, match=r"torch\.nn\.Transformer is not"):
        facade.nn.Transformer(d_model=8)   # importable (libraries import it), reported when made
    assert not hasattr(facade, "no_such_function") and getattr(facade.nn, "LazyLinear", None) is None
    with pytest.raises(ImportError, match=r"torch\.fft is not implemented"):
        with torch_proxy(scope={"never_imported"}):
            from oarlock_torch_proxy.hook import proxy_import
            proxy_import("torch.fft")
    with pytest.raises(NotImplementedError, match=r"torch\.autocast\(device_type='cpu'"):
        with facade.autocast("cpu"):
            pass


def test_scoped_library_works_without_real_torch_imported():
    """A fresh process: nothing imports the real torch, yet einops (which looks for "torch" in sys.modules
    before using it) works through the proxy, and sys.modules still has no torch."""
    pytest.importorskip("einops")
    import subprocess
    code = textwrap.dedent("""
        import sys, oarlock
        with oarlock.compat.torch_proxy(scope={"einops"}):
            import einops
        out = einops.rearrange(oarlock.arange(6).reshape([2, 3]), "a b -> b a")
        assert isinstance(out, oarlock.Tensor) and out.shape == [3, 2], out
        assert out.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
        assert "torch" not in sys.modules
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


def test_plain_torch_script_runs_everywhere_mode(tmp_path, torch):
    """scope=None on a plain PyTorch training script run as __main__ (scripts/train_script.py: CNN, BatchNorm,
    DataLoader, SGD + StepLR, eval under no_grad, `logits.max(1)`): the same losses, accuracy and BatchNorm
    statistics as the real torch from the same initial weights."""
    import json
    import subprocess
    scripts = Path(__file__).parent / "scripts"
    init, real_out, proxy_out = tmp_path / "init.npz", tmp_path / "real.json", tmp_path / "proxy.json"
    for command in ([sys.executable, str(scripts / "train_script.py"), str(real_out), "--save-init", str(init)],
                    [sys.executable, str(scripts / "run_with_proxy.py"), str(scripts / "train_script.py"),
                     str(proxy_out), "--load-init", str(init)]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    real, proxied = json.loads(real_out.read_text()), json.loads(proxy_out.read_text())
    assert real["torch"] == "torch" and proxied["torch"].startswith("oarlock")
    assert real["correct"] == proxied["correct"] and real["lr"] == proxied["lr"]
    for key in ("losses", "max_values", "running_var"):
        a, b = np.array(real[key]), np.array(proxied[key])
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max(), key
