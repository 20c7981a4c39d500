"""examples/plugins/oarlock-vendor-example, installed by pip for real: its entry point is discovered,
`oarlock plugins` lists it with its kernel reuse, and an MLP trains on its device "acme_npu" (derived
from "cpu" through register_cuda_like_device) with its own matmul, relu and softmax kernels, matching
the same training on "cpu"."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("oarlock_cuda")  # supplies register_cuda_like_device

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "plugins" / "oarlock-vendor-example"


@pytest.fixture(scope="module")
def site(install_example):
    """A directory holding the installed example."""
    return install_example(EXAMPLE)


def _run(args, site, **env):
    environ = dict(os.environ)
    environ.pop("OARLOCK_DISABLE_PLUGINS", None)
    environ.pop("OARLOCK_DISABLE_PLUGIN_AUTOLOAD", None)
    environ["PYTHONPATH"] = str(site) + os.pathsep + environ.get("PYTHONPATH", "")
    environ.update(env)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=environ, timeout=120)


def test_oarlock_plugins_lists_the_vendor_plugin_and_its_reuse(site):
    result = _run(["-m", "oarlock.cli", "plugins"], site)
    assert result.returncode == 0, result.stderr
    block = result.stdout.split("acme  (oarlock-vendor-example 0.1.0)\n", 1)[1].split("\n\n")[0].splitlines()
    assert block[:3] == ["    hooks:   oarlock_register_backends, oarlock_register_ops",
                         "    devices: acme_npu", "    kernels: 3"], result.stdout
    reuse = block[3]
    assert reuse.startswith("    reuse:   acme_npu: ") and "kernels reused from cpu" in reuse, reuse
    assert reuse.endswith(", 3 overridden") and "%)" in reuse, reuse
    assert "WARNING" not in result.stdout.split("checkpoint  (")[0]

    listing = _run(["-m", "oarlock.cli", "plugins", "--json"], site)
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    (entry,) = rows["acme"]["reuse"]
    assert entry["device"] == "acme_npu" and entry["parent"] == "cpu" and entry["problems"] == []
    assert entry["overridden"] == 3 and entry["reused"] > 100 and entry["total"] == entry["reused"] + 3
    rate = 100.0 * entry["reused"] / entry["total"]
    assert reuse == (f"    reuse:   acme_npu: {entry['reused']} of {entry['total']} kernels reused from cpu "
                     f"({rate:.1f}%), 3 overridden")
    assert rows["cpu"]["reuse"] == []  # not a derived device


TRAIN = '''
import numpy as np
import oarlock
import oarlock_acme
from oarlock_acme.plugin import runtime

def train(device, steps=25):
    oarlock.seed(7)
    oarlock.set_device(device)
    rng = np.random.default_rng(0)
    features = rng.standard_normal((64, 4)).astype("float32")
    x = oarlock.to_tensor(features)
    labels = (features[:, 0] - features[:, 1] > 0).astype("int64")
    onehot = oarlock.to_tensor(np.eye(2, dtype="float32")[labels])
    model = oarlock.nn.Sequential(oarlock.nn.Linear(4, 16), oarlock.nn.ReLU(), oarlock.nn.Linear(16, 2))
    opt = oarlock.optimizer.SGD(learning_rate=0.5, parameters=model.parameters())
    losses = []
    for step in range(steps):
        # the loss from softmax probabilities, so that the device's softmax kernel runs every step
        probs = oarlock.nn.functional.softmax(model(x), axis=-1)
        loss = -oarlock.log((probs * onehot).sum(axis=-1)).mean()
        loss.backward()
        if step == steps - 1:
            places = {str(p.place) for p in model.parameters()} | {str(p.grad.place) for p in model.parameters()}
        opt.step()
        opt.clear_grad()
        losses.append(loss.item())
    oarlock.device.synchronize()
    return losses, [p.numpy() for p in model.parameters()], places, str(loss.place)

cpu_losses, cpu_params, cpu_places, _ = train("cpu")
assert sum(oarlock_acme.CALLS.values()) == 0, oarlock_acme.CALLS
losses, params, places, loss_place = train("acme_npu:1")
print("places", sorted(places), loss_place)
print("calls", sorted(oarlock_acme.CALLS.items()))
print("runtime", runtime.synchronized, runtime.current)
print("loss", losses[0], losses[-1])
print("match", np.allclose(losses, cpu_losses, rtol=1e-5, atol=1e-6),
      all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(params, cpu_params)))
print("devices", oarlock.device.get_available_custom_device())
'''


def test_mlp_trains_on_the_vendor_device_with_its_kernels(site):
    # the "gpu" device (oarlock-cuda's own plugin) plays no part here: acme_npu derives from "cpu"
    result = _run(["-c", textwrap.dedent(TRAIN)], site, OARLOCK_DISABLE_PLUGINS="cuda")
    assert result.returncode == 0, result.stderr
    out = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert out["places"] == "['acme_npu:1'] acme_npu:1"  # parameters, their grads and the loss
    calls = dict(eval(out["calls"]))  # noqa: S307 - our own subprocess's output
    assert set(calls) == {"matmul", "relu", "softmax"} and min(calls.values()) >= 25, calls
    assert out["runtime"] == "1 1"  # its synchronize ran, and set_device made chip 1 its current device
    first, last = map(float, out["loss"].split())
    assert last < 0.5 * first, out["loss"]
    assert out["match"] == "True True"
    assert "'acme_npu:0', 'acme_npu:1'" in out["devices"]
