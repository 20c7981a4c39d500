"""oarlock-ops registers each op family as its own plugin (oarlock_ops.families): the installed entry points
are the families, `oarlock plugins` lists each with its kernels, the families register in any order, and
OARLOCK_DISABLE_PLUGINS=conv turns off convolution and pooling only: an MLP still trains, and calling
conv2d says which plugin provides it and that it is disabled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

from oarlock.plugins import PluginManager

from oarlock_ops import families

# families with Python-level functions over other families' ops, and no ops of their own
API_ONLY = {"compat", "ctc", "losses_extra", "nn_extras", "resample"}


def _run(code, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OARLOCK_DISABLE_PLUGINS", "OARLOCK_DISABLE_PLUGIN_AUTOLOAD")}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=300)


def test_installed_entry_points_are_the_families():
    """pyproject.toml names every family of FAMILIES (re-run `pip install -e plugins/ops` if this fails:
    entry points are read from the installed metadata)."""
    ours = {ep.name: ep.value for ep in entry_points(group="oarlock.plugins")
            if ep.dist is not None and ep.dist.metadata["Name"] == "oarlock-ops"}
    assert ours == {name: f"oarlock_ops.families:{name}" for name in families.FAMILIES}
    assert all(name.isidentifier() for name in ours)


def test_oarlock_plugins_lists_each_family_with_its_kernels():
    result = _run("from oarlock.cli import main; main(['plugins', '--json'])")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert "ops" not in rows
    for name in families.FAMILIES:
        row = rows[name]
        assert row["distribution"] == "oarlock-ops" and row["error"] is None, row
        if name in API_ONLY:
            assert row["hooks"] == ["oarlock_register_api"] and row["kernels"] == 0, row
        else:
            assert "oarlock_register_ops" in row["hooks"] and row["kernels"] > 0, row
    for name in ("nn", "io"):   # the framework layer: public names only, no kernels
        assert rows[name]["distribution"] == f"oarlock-{name}" and rows[name]["hooks"] == ["oarlock_register_api"]
        assert rows[name]["kernels"] == 0 and rows[name]["error"] is None


def test_families_register_in_any_order():
    """No family's registration needs another's ops: registered in reverse order into an isolated
    manager, every family registers and defines the same ops as in name order."""
    def register(names):
        manager = PluginManager(group="oarlock.no-such-group", environ={}).load()
        for name in names:
            manager.register(getattr(families, name), name)
        assert not manager.failures
        return {name: manager.registry.kernel_count[name] for name in names}, set(manager.registry.ops)

    forward = register(sorted(families.FAMILIES))
    assert register(sorted(families.FAMILIES, reverse=True)) == forward


def test_disabling_conv_leaves_an_mlp_training_and_conv2d_names_the_disabled_plugin():
    result = _run('''
        import numpy as np
        import oarlock
        from oarlock import nn
        from oarlock.plugins import default_manager

        oarlock.seed(0)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((64, 2)).astype("float32")
        label = (x[:, 0] * x[:, 1] > 0).astype("int64")
        x, label = oarlock.to_tensor(x), oarlock.to_tensor(label)
        model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))
        opt = oarlock.optimizer.Adam(learning_rate=0.05, parameters=model.parameters())
        losses = []
        for _ in range(60):
            loss = nn.functional.cross_entropy(model(x), label)
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        print("losses", losses[0], losses[-1])

        image, weight = oarlock.ones([1, 1, 4, 4]), oarlock.ones([1, 1, 3, 3])
        for what, call in (("conv2d", lambda: oarlock.nn.functional.conv2d(image, weight)),
                           ("Conv2D", lambda: nn.Conv2D(1, 1, 3)(image))):
            try:
                call()
            except Exception as exc:
                print(what, "error:", type(exc).__name__, str(exc).replace(chr(10), " "))
            else:
                print(what, "ran")
        rows = {row.name: row for row in default_manager().info()}
        print("conv listed:", "conv" in rows, "failures:", sorted(default_manager().failures))
        print("norm kernels:", rows["norm"].kernels > 0, "linalg kernels:", rows["linalg"].kernels > 0)
    ''', OARLOCK_DISABLE_PLUGINS="conv")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first, last = map(float, lines[0].split()[1:])
    assert last < 0.5 * first, lines[0]
    for line in lines[1:3]:
        assert " error: AttributeError " in line, line
        assert "'conv'" in line and "disabled" in line, line
    assert lines[3] == "conv listed: False failures: []", result.stderr
    assert lines[4] == "norm kernels: True linalg kernels: True"
    assert "PluginLoadWarning" not in result.stderr, result.stderr
