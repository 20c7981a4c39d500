"""examples/plugins/oarlock-custom-op-example, installed by pip for real: setup()/CppExtension compile its C++
op into the package, its entry point registers the op like any plugin's, `oarlock plugins` lists it, and the
op's forward and C++ gradient match float64 numpy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "oarlock-custom-op-example"


@pytest.fixture(scope="module")
def site(install_example):
    """A directory holding the installed example."""
    return install_example(EXAMPLE)


def _run(code, site):
    environ = dict(os.environ)
    environ.pop("OARLOCK_DISABLE_PLUGINS", None)
    environ.pop("OARLOCK_DISABLE_PLUGIN_AUTOLOAD", None)
    environ["PYTHONPATH"] = str(site) + os.pathsep + environ.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_installed_library_is_in_the_package(site):
    assert (site / "oarlock_custom_op_example" / "_ops.so").is_file()


def test_op_runs_with_its_cpp_gradient_and_the_plugin_is_listed(site):
    out = _run('''
        import contextlib, io, json
        import numpy as np
        import oarlock
        from oarlock.cli import main
        rng = np.random.default_rng(0)
        x = oarlock.to_tensor(rng.standard_normal((5, 4)), stop_gradient=False)
        b = oarlock.to_tensor(rng.standard_normal(4), stop_gradient=False)
        w = rng.standard_normal((5, 4))
        y = oarlock.fused_bias_relu(x, b)
        (y * oarlock.to_tensor(w)).sum().backward()
        listing = io.StringIO()
        with contextlib.redirect_stdout(listing):
            main(["plugins"])
        print(json.dumps({"x": x.numpy().tolist(), "b": b.numpy().tolist(), "w": w.tolist(),
                          "y": y.numpy().tolist(), "gx": x.grad.numpy().tolist(), "gb": b.grad.numpy().tolist(),
                          "library_op": oarlock.ops.custom_op_example.fused_bias_relu is oarlock.fused_bias_relu,
                          "listing": listing.getvalue()}))
    ''', site)
    r = json.loads(out.splitlines()[-1])
    x, b, w = (np.array(r[k]) for k in ("x", "b", "w"))
    z = x + b
    np.testing.assert_allclose(r["y"], np.maximum(z, 0), rtol=1e-12)
    np.testing.assert_allclose(r["gx"], w * (z > 0), rtol=1e-12)
    np.testing.assert_allclose(r["gb"], (w * (z > 0)).sum(axis=0), rtol=1e-12)
    assert r["library_op"]
    block = r["listing"].split("custom_op_example  (oarlock-custom-op-example 0.1.0)\n", 1)[1].split("\n\n")[0]
    assert "hooks:   oarlock_register_ops" in block and "kernels: 2" in block   # the op and its gradient op
