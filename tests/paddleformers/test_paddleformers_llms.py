"""PaddleFormers' decoder LLMs (Llama, Qwen2, Qwen3) run unedited on oarlock with `paddle` aliased to it.

PaddleFormers 0.4.0 is installed into a cache with `pip --no-deps` plus the light packages its import path
uses (see pf_install.py, which also says which single module is stubbed and why); the test skips when pip
cannot obtain it. pf_models.py runs every case once on real Paddle 3.2 (which initialises the tiny models and
saves their weights) and once on oarlock (which loads those weights), each in its own subprocess. Compared,
per case, against real Paddle: the loss and logits of a training-mode forward with labels and a padding mask
(relative error max|a - b| / max|b| at most 1e-4), every parameter's gradient (1e-3 relative, the same set of
parameters), and for the base cases the tokens of PaddleFormers' greedy `generate` with its KV cache (equal)
and their scores (1e-4). Variants: activation recomputation through fleet's recompute (Llama, Qwen2; both
frameworks recompute); Llama with incubate's fused_rotary_position_embedding in its attention (oarlock)
against Paddle's unfused rotate_half formula; Qwen2 with fuse_rms_norm / fuse_swiglu / fuse_linear (incubate's
fused_rms_norm_ext, swiglu and FusedLinear on oarlock) against Paddle's unfused layers (Paddle 3.2 has no CPU
kernels for the fused rope, RMS norm and GEMM-epilogue ops). And Llama with tensor parallelism on two ranks,
without and with sequence parallelism (`oarlock launch -n 2`, fleet's mp_degree 2: pf_tp_job.py), against
Paddle's one-process run, slice by slice.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pf_install
import pf_models

pytest.importorskip("paddle", reason="real Paddle 3.2 is the oracle of these tests")

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(framework, outdir, pf_dir):
    env = dict(os.environ, PYTHONWARNINGS="ignore", FLAGS_enable_paddleformers_monkey_patch="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "pf_models.py"), framework, str(outdir), pf_dir],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, f"{framework} run failed:\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pf_dir, why = pf_install.obtain()
    if pf_dir is None:
        pytest.skip(f"PaddleFormers 0.4.0 could not be obtained: {why}")
    paddle_dir = tmp_path_factory.mktemp("paddle")
    oarlock_dir = tmp_path_factory.mktemp("oarlock")
    _run("paddle", paddle_dir, pf_dir)
    for name in os.listdir(paddle_dir):
        if name.startswith("weights_"):
            os.link(paddle_dir / name, oarlock_dir / name)
    _run("oarlock", oarlock_dir, pf_dir)
    return paddle_dir, oarlock_dir


def _load(directory, case):
    error = directory / f"{case}.error.txt"
    if error.exists():
        pytest.fail(f"{case} failed on {directory.name}:\n{error.read_text()}")
    return np.load(directory / f"{case}.npz")


def _rel(got, want):
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


@pytest.mark.parametrize("case", list(pf_models.CASES))
def test_forward_backward_matches_paddle(results, case):
    paddle_dir, oarlock_dir = results
    want, got = _load(paddle_dir, case), _load(oarlock_dir, case)
    for key in ("loss", "logits"):
        assert got[key].shape == want[key].shape, key
        assert _rel(got[key], want[key]) <= 1e-4, f"{case}: {key} differs by {_rel(got[key], want[key]):.2e}"
    grads_want = sorted(k for k in want.files if k.startswith("grad/"))
    grads_got = sorted(k for k in got.files if k.startswith("grad/"))
    assert grads_got == grads_want
    assert len(grads_want) > 10
    errors = {k: _rel(got[k], want[k]) for k in grads_want}
    assert max(errors.values()) <= 1e-3, {k: e for k, e in errors.items() if e > 1e-3}
    assert all(np.abs(want[k]).max() > 0 for k in grads_want)     # every parameter really gets a gradient


@pytest.mark.parametrize("case", [c for c, (_, v) in pf_models.CASES.items() if v == "base"])
def test_greedy_generate_matches_paddle(results, case):
    paddle_dir, oarlock_dir = results
    want, got = _load(paddle_dir, case), _load(oarlock_dir, case)
    assert got["tokens"].shape == (pf_models.BATCH, pf_models.NEW_TOKENS)
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    assert len(np.unique(want["tokens"])) > 2      # the decoding is not stuck on one token
    assert _rel(got["scores"], want["scores"]) <= 1e-4


@pytest.mark.parametrize("case", [c for c, (_, v) in pf_models.CASES.items() if v != "base"])
def test_variants_take_their_path(results, case):
    """The recompute cases really call fleet's recompute (once per decoder layer) on both sides; the fused cases
    really call incubate's functions on oarlock (and build FusedLinear layers)."""
    paddle_dir, oarlock_dir = results
    family, variant = pf_models.CASES[case]
    got = _load(oarlock_dir, case)
    assert int(got["spied_calls"]) >= pf_models.LAYERS
    if variant == "recompute":
        assert int(_load(paddle_dir, case)["spied_calls"]) == int(got["spied_calls"])
    if variant == "fused":
        assert int(got["fused_linear_layers"]) == 7 * pf_models.LAYERS     # q, k, v, o, gate, up, down


@pytest.fixture(scope="module")
def tensor_parallel(results, tmp_path_factory):
    """pf_tp_job.py's two ranks (Llama, mp_degree 2) under `oarlock launch -n 2`: their saved results."""
    paddle_dir, _ = results
    pf_dir, _ = pf_install.obtain()
    outdir = tmp_path_factory.mktemp("tensor_parallel")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OARLOCK_COLLECTIVE_TIMEOUT="120")
    proc = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", "2", os.path.join(HERE, "pf_tp_job.py"),
                           str(paddle_dir), pf_dir, str(outdir)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, f"tensor-parallel job failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return paddle_dir, outdir


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "tp_sp"])
def test_tensor_parallel_llama_matches_paddle(tensor_parallel, sequence_parallel):
    """Each rank's loss equals Paddle's, its logits and gradients equal its slice of Paddle's (1e-4 / 1e-3); the
    sliced parameters are exactly the ones PaddleFormers marks is_distributed (attention, MLP, embedding, head);
    with sequence parallelism the seven linears of each layer are the sequence-parallel ones."""
    paddle_dir, outdir = tensor_parallel
    want = _load(paddle_dir, "llama")
    ranks = [np.load(outdir / f"rank{r}{'_sp' if sequence_parallel else ''}.npz") for r in range(2)]
    for rank, got in enumerate(ranks):
        assert int(got["sequence_parallel_layers"]) == (7 * pf_models.LAYERS if sequence_parallel else 0)
        assert _rel(got["loss"], want["loss"]) <= 1e-4
        logits = want["logits"]
        assert got["logits"].shape[-1] == logits.shape[-1] // 2          # the parallel head's vocabulary slice
        assert _rel(got["logits"], np.split(logits, 2, axis=-1)[rank]) <= 1e-4
        names = sorted(k[len("grad/"):] for k in got.files if k.startswith("grad/"))
        assert ["grad/" + n for n in names] == sorted(k for k in want.files if k.startswith("grad/"))
        sliced = 0
        for name in names:
            full, local = want["grad/" + name], got["grad/" + name]
            split = full.shape != local.shape
            if split:
                axis = next(i for i, (a, b) in enumerate(zip(full.shape, local.shape)) if a != b)
                full = np.split(full, 2, axis=axis)[rank]
            assert bool(got["distributed/" + name]) == split, name
            sliced += split
            assert _rel(local, full) <= 1e-3, (rank, name, _rel(local, full))
        assert sliced == 7 * pf_models.LAYERS + 2
