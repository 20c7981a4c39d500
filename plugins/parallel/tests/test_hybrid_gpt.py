"""examples/hybrid_gpt.py: the same GPT from the same full weights under every parallel layout of issue 17.

One `--save-init` writes the full initial weights; one process trains 20 steps on the whole global batch
(the reference, computed once per module) and PyTorch in float64 trains the same GPT with the same AdamW
and global-norm clipping as its oracle (clip_norm 1.0 bites in some steps: the reference reports its
gradient norms). Each layout is then a real `python -m oarlock.cli launch -n N` job whose per-step
global-batch losses must equal the reference within 1e-5 relative (float32). A vocabulary not divisible
by mp must give VocabParallelEmbedding's clear error on every rank (scripts/hybrid_gpt_error_job.py
catches each rank's error and gathers them through raw mpi4py), and --help must work.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from parallel_jobs import EXAMPLE, EXAMPLE_ENV, job_report, launch_command, run_example, save_gpt_init, train_gpt

import oarlock

pytest.importorskip("mpi4py")

RTOL = 1e-5

# config: (ranks, the example's layout flags)
LAYOUTS = {
    "dp2": (2, ["--dp", "2"]),
    "dp4": (4, ["--dp", "4"]),
    "mp2": (2, ["--mp", "2"]),
    "mp4": (4, ["--mp", "4"]),
    "mp2_sp": (2, ["--mp", "2", "--sp"]),
    "sharding2": (2, ["--sharding", "2"]),
    "sharding4": (4, ["--sharding", "4"]),
    "group_sharded_os_g": (4, ["--group-sharded", "os_g"]),
    "group_sharded_p_g_os": (4, ["--group-sharded", "p_g_os"]),
    "dp2_mp2": (4, ["--dp", "2", "--mp", "2"]),
    "sharding2_mp2": (4, ["--sharding", "2", "--mp", "2"]),
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hybrid_gpt")


@pytest.fixture(scope="module")
def init(workdir) -> Path:
    return save_gpt_init(workdir)


@pytest.fixture(scope="module")
def reference(init, workdir) -> dict:
    return train_gpt(1, [], init, workdir / "reference.json")


def _torch_training(init: Path, tied: bool = False) -> list:
    """The example's GPT, AdamW and ClipGradByGlobalNorm in PyTorch float64 from the same full weights:
    the per-step losses on the same global batches (the oracle of the one-process reference). `tied`: the
    LM head is the token embedding's transpose (--tie-embeddings; head.weight unused)."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        from hybrid_gpt import global_batch
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    weights = {k: torch.tensor(v.numpy(), dtype=torch.float64, requires_grad=True)
               for k, v in oarlock.load(str(init)).items()}
    vocab, width, layers, heads, seq_len, batch = 64, 32, 2, 4, 16, 8
    head_dim = width // heads
    causal = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)

    def norm(x, name):
        return torch.nn.functional.layer_norm(x, (width,), weights[f"{name}.weight"], weights[f"{name}.bias"], 1e-5)

    def linear(x, name, bias=True):
        return x @ weights[f"{name}.weight"] + (weights[f"{name}.bias"] if bias else 0)

    def loss_of(tokens, labels):
        x = weights["embed.weight"][tokens] + weights["position.weight"][torch.arange(seq_len)]
        for i in range(layers):
            qkv = linear(norm(x, f"blocks.{i}.ln1"), f"blocks.{i}.attn.qkv")
            qkv = qkv.reshape(batch, seq_len, heads, 3, head_dim).permute(3, 0, 2, 1, 4)   # columns per head
            scores = qkv[0] @ qkv[1].transpose(-1, -2) / head_dim ** 0.5
            context = torch.softmax(scores.masked_fill(causal, float("-inf")), -1) @ qkv[2]
            x = x + linear(context.transpose(1, 2).reshape(batch, seq_len, width), f"blocks.{i}.attn.out")
            hidden = torch.nn.functional.gelu(linear(norm(x, f"blocks.{i}.ln2"), f"blocks.{i}.mlp.fc1"),
                                              approximate="tanh")
            x = x + linear(hidden, f"blocks.{i}.mlp.fc2")
        x = norm(x, "ln_f")
        logits = x @ weights["embed.weight"].T if tied else linear(x, "head", bias=False)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))

    params = [w for k, w in weights.items() if not (tied and k == "head.weight")]
    optimizer = torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for step in range(20):
        tokens, labels = (torch.from_numpy(a) for a in global_batch(step, 0, batch, seq_len, vocab))
        loss = loss_of(tokens, labels)
        optimizer.zero_grad()
        loss.backward()
        with torch.no_grad():   # Paddle's ClipGradByGlobalNorm: scale by clip_norm / max(norm, clip_norm)
            total = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
            for p in params:
                p.grad *= 1.0 / max(float(total), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_reference_matches_torch_float64(reference, init):
    np.testing.assert_allclose(reference["losses"], _torch_training(init), rtol=RTOL)


def test_reference_learns_and_clipping_bites(reference):
    losses, norms = reference["losses"], reference["grad_norms"]
    assert len(losses) == len(norms) == 20
    assert losses[-1] < 0.7 * losses[0], losses
    clipped = sum(n > 1.0 for n in norms)
    assert 0 < clipped < 20, f"clip_norm 1.0 must bite in some steps, not all: gradient norms {norms}"


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_equal_losses(layout, reference, init, workdir):
    ranks, flags = LAYOUTS[layout]
    got = train_gpt(ranks, flags, init, workdir / f"{layout}.json")
    assert got["layout"]["world"] == ranks
    np.testing.assert_allclose(got["losses"], reference["losses"], rtol=RTOL, atol=0,
                               err_msg=f"{layout}: per-step losses differ from one process")


def test_help_tells_the_flags(tmp_path):
    text = run_example([sys.executable, str(EXAMPLE), "--help"], tmp_path).stdout
    for flag in ("--dp", "--mp", "--sharding", "--sp", "--group-sharded", "--steps", "--seed", "--json",
                 "--init", "--save-init", "oarlock launch -n 4 examples/hybrid_gpt.py --dp 2 --mp 2"):
        assert flag in text, flag


def test_vocab_not_divisible_by_mp_fails_on_every_rank(tmp_path):
    out = tmp_path / "errors.json"
    errors = job_report(launch_command("hybrid_gpt_error_job", out, "--mp", "2", "--vocab", "63", "--steps", "1"),
                        out, "2-rank hybrid_gpt error job", timeout=120, cwd=tmp_path)
    assert errors == ["ValueError: VocabParallelEmbedding: num_embeddings (63) must be divisible by the "
                      "model-parallel degree (2)"] * 2, errors


def test_bad_flags_are_refused(tmp_path):
    for flags, message in ((["--sp"], "--sp needs --mp > 1"),
                           (["--group-sharded", "os", "--dp", "2"], "leave --dp, --mp and --sharding at 1")):
        done = subprocess.run([sys.executable, str(EXAMPLE), *flags], capture_output=True, text=True, env=EXAMPLE_ENV,
                              cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and message in done.stderr, done.stderr
