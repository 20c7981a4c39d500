"""`oarlock train --moe-experts E --moe-top-k K [--moe-aux-weight W] [--ep N]`: the mixture-of-experts GPT.

- a few steps in one process log the gates' aux loss (progress line, train/aux_loss in --log-dir), which
  equals GShard's loss written here in float64 numpy from Paddle's gate code, summed over the blocks, and
  enters the objective times --moe-aux-weight;
- `--ep 2`, `--ep 4`, `--nproc 4 --ep 2` (ep 2 x dp 2) and `--nproc 2` (dp 2), real MPI jobs through
  `oarlock launch` with the default aux weight, give the per-step losses, aux losses and validation loss of
  one process holding every expert within 1e-5 relative over 20 steps (the gates draw random routing for the
  whole batch and compute the aux loss over it: batch_group, global_aux); the ep2 job's checkpoint holds the
  full model in the one-process format;
- bad option combinations are refused before any rank starts.

The aux-loss checks run test_train_parallel's small runs (4 steps of 4 x 32-byte rows, seed 3, no dropout);
the layouts run a tinier one (20 steps of 4 x 16-byte rows, 4 experts of hidden width 32).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import oarlock
from oarlock_train import command, moe_model
from oarlock_train.moe_model import MoEConfig, MoEGPT

# the launched-run helpers of test_train_parallel (pytest imports test files with importlib: not on sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_parallel import RTOL, SMALL, STEPS, history, launched, one_process

MOE = ["--moe-experts", "4", "--moe-top-k", "2"]
# the layouts' runs: 20 steps (options after SMALL's override them), the default aux weight
TINY_STEPS = 20
TINY = ["--steps", str(TINY_STEPS), "--eval-every", str(TINY_STEPS), "--seq-len", "16", *MOE,
        "--moe-expert-hidden", "32"]
LAYOUTS = {"ep2": (["--ep", "2"], "2 ranks (dp 1 x ep 2 x mp 1)"),
           "ep4": (["--ep", "4"], "4 ranks (dp 1 x ep 4 x mp 1)"),
           "ep2xdp2": (["--nproc", "4", "--ep", "2"], "4 ranks (dp 2 x ep 2 x mp 1)"),
           "dp2": (["--nproc", "2"], "2 ranks (dp 2 x mp 1)")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One-process runs (each started once): `one`, SMALL without the aux loss; `tiny`, TINY (the layouts'
    reference)."""
    root = tmp_path_factory.mktemp("moe")
    return {"one": one_process(root / "one", *MOE, "--moe-aux-weight", "0"), "tiny": one_process(root / "tiny", *TINY),
            "tiny_dir": root / "tiny"}


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """layout(name): (history, stdout, out dir) of the TINY job on LAYOUTS[name], started once."""
    done: dict = {}

    def run(name):
        if name not in done:
            out = tmp_path_factory.mktemp("moe") / name
            saved, stdout, _ = launched(out, *TINY, *LAYOUTS[name][0])
            done[name] = (saved, stdout, out)
        return done[name]
    return run


def _max_relative(got, want) -> float:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want) / np.abs(want)))


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_losses_equal_one_process_with_the_aux_loss(runs, layout, name):
    saved, stdout, _ = layout(name)
    want = runs["tiny"]
    assert LAYOUTS[name][1] in stdout
    assert len(saved["train"]) == len(saved["aux"]) == len(want["train"]) == TINY_STEPS
    # the per-step losses (the cross entropy), the logged aux losses (the whole batch's on every rank, so
    # their mean is one process's) and the validation loss
    for key in ("train", "aux"):
        assert _max_relative(saved[key], want[key]) <= RTOL, (key, saved[key], want[key])
    assert [s for s, _ in saved["valid"]] == [s for s, _ in want["valid"]] == [TINY_STEPS]
    assert _max_relative([v for _, v in saved["valid"]], [v for _, v in want["valid"]]) <= RTOL
    assert min(want["aux"]) > 0 and want["train"][-1] < want["train"][0]


def test_ep2_checkpoint_holds_the_full_model(runs, layout, tmp_path):
    one = oarlock.load(str(runs["tiny_dir"] / "model.safetensors"))
    ep2_saved, _, ep2_dir = layout("ep2")
    ep2 = oarlock.load(str(ep2_dir / "model.safetensors"))
    assert list(ep2) == list(one)   # every expert, under the one-process names and order
    assert "blocks.3.mlp.experts.3.proj.weight" in one and "blocks.0.mlp.gate.gate.weight" in one
    for name in one:
        # per tensor, not per element: AdamW's normalised step magnifies float32 rounding where a gradient is
        # tiny into a single element off by ~3e-5 (weights ~0.02, a step moves them by up to 6e-3); an expert
        # in the wrong place would be off by ~100 %
        got, want = ep2[name].numpy(), one[name].numpy()
        assert np.linalg.norm(got - want) <= 1e-4 * np.linalg.norm(want), name
    # one process loads it (weights and AdamW states) and evaluates it to the job's validation loss
    from oarlock_train import checkpoint
    from oarlock_train.corpus import build_corpus
    from oarlock_train.trainer import Trainer, TrainConfig
    cfg = TrainConfig(steps=TINY_STEPS, seed=3, batch_size=4, seq_len=16, warmup=1, moe_experts=4, moe_top_k=2,
                      moe_expert_hidden=32)
    trainer = Trainer(cfg, build_corpus(cfg.seq_len))
    checkpoint.load(trainer, ep2_dir)
    assert trainer.step == TINY_STEPS and len(trainer.optimizer.state_dict()) > len(one)
    np.testing.assert_allclose(trainer.evaluate(), ep2_saved["valid"][-1][1], rtol=RTOL)


def _gshard_aux(logits: np.ndarray) -> float:
    """GShard's loss of one gate (Paddle's GShardGate.forward) in float64: c_e = the share of the top-2
    slots that pick expert e, m_e = the mean softmax probability of e; mean(c * m) * E ** 2."""
    logits = logits.astype(np.float64)
    tokens, experts = logits.shape
    top2 = np.argsort(-logits, axis=1)[:, :2]
    c = np.bincount(top2.ravel(), minlength=experts) / tokens
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    m = (p / p.sum(axis=1, keepdims=True)).mean(axis=0)
    return float(np.mean(c * m) * experts ** 2)


def test_aux_loss_is_gshards_summed_over_blocks_and_weighted(tmp_path):
    from oarlock_train.trainer import Trainer, TrainConfig
    from oarlock_train.corpus import build_corpus

    cfg = TrainConfig(steps=2, seed=3, batch_size=4, seq_len=32, moe_experts=4, moe_top_k=2, moe_aux_weight=0.5)
    trainer = Trainer(cfg, build_corpus(cfg.seq_len))
    scores = []
    hooks = [b.mlp.gate.gate.register_forward_post_hook(lambda layer, inp, out: scores.append(out.numpy()))
             for b in trainer.model.blocks]
    objective = {}
    original = trainer._objective

    def recording(loss):
        result = original(loss)
        objective.update(loss=float(loss.item()), objective=float(result.item()))
        return result

    trainer._objective = recording
    loss = trainer.train_step()
    for hook in hooks:
        hook.remove()
    assert len(scores) == 4   # one gate per block, one forward
    want = sum(_gshard_aux(s) for s in scores)
    np.testing.assert_allclose(trainer.history.aux, [want], rtol=1e-5)
    assert objective["loss"] == loss
    np.testing.assert_allclose(objective["objective"], loss + 0.5 * want, rtol=1e-6)


def test_moe_run_logs_the_aux_loss(runs, tmp_path, capsys):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    out = tmp_path / "run"
    assert command.main([*SMALL, "--out", str(out), *MOE, "--log-dir", str(tmp_path / "tb")]) == 0
    captured = capsys.readouterr()
    assert "4 experts per block, top 2, gshard gate, aux loss weight 0.01" in captured.out
    logged = [float(line.rsplit("| aux ", 1)[1]) for line in captured.err.splitlines() if "| aux " in line]
    assert len(logged) >= 2 and all(value > 0 for value in logged)
    reader = accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    reader.Reload()
    aux = reader.Scalars("train/aux_loss")
    assert [e.step for e in aux] == list(range(1, STEPS + 1))
    saved = history(out)
    np.testing.assert_allclose([e.value for e in aux], saved["aux"], rtol=1e-6)   # trainer.json keeps them too
    np.testing.assert_allclose([saved["aux"][0], saved["aux"][-1]], [logged[0], logged[-1]], rtol=1e-3)
    # with the weight the objective differs from the weightless run's from the second step on, not before
    train = saved["train"]
    np.testing.assert_allclose(train[0], runs["one"]["train"][0], rtol=RTOL)
    assert abs(train[1] - runs["one"]["train"][1]) > 1e-4 * abs(train[1])
    # in two pieces with --resume: the same losses and aux losses
    assert command.main([*SMALL, "--out", str(tmp_path / "pieces"), *MOE, "--stop-after", "2"]) == 0
    assert command.main([*SMALL, "--out", str(tmp_path / "pieces"), *MOE, "--resume"]) == 0
    assert history(tmp_path / "pieces") == saved


def test_parameter_counts():
    from oarlock_train.model import GPT, GPTConfig
    cfg = GPTConfig(max_seq_len=8)
    model = MoEGPT(cfg, MoEConfig(8, 2, expert_hidden=256))
    expert = 128 * 256 + 256 + 256 * 128 + 128
    gate = 128 * 8 + 8
    dense = GPT(cfg).num_parameters()
    assert model.num_parameters() == dense - 4 * (128 * 512 + 512 + 512 * 128 + 128) + 4 * (8 * expert + gate)
    assert model.active_parameters() == model.num_parameters() - 4 * 6 * expert
    # the dense GPT's active count, plus each block's gate and the second expert's output bias
    assert model.active_parameters() == dense + 4 * (gate + 128)


@pytest.mark.parametrize("argv, message", [
    ([*MOE[:2], "--moe-top-k", "5"], "argument --moe-top-k: expected at most --moe-experts (4) experts per token, "
                                     "got 5"),
    (["--moe-experts", "6", "--ep", "4"], "argument --ep: the 6 experts (--moe-experts) cannot be split equally "
                                          "over 4 expert-parallel ranks"),
    (["--moe-top-k", "2"], "argument --moe-top-k: got 2, but the model has no experts; it needs --moe-experts E"),
    (["--ep", "2"], "argument --ep: got 2, but the model has no experts"),
    (["--moe-aux-weight", "0.1"], "argument --moe-aux-weight: got 0.1, but the model has no experts"),
    ([*MOE, "--nproc", "2", "--mp", "2"], "argument --mp: the MoE GPT (--moe-experts) combines with --dp and --ep "
                                          "only, got --mp 2"),
    ([*MOE, "--recompute"], "argument --recompute: not with --moe-experts"),
    ([*MOE, "--nproc", "4", "--ep", "2", "--batch-size", "6"], "argument --batch-size: 6 rows cannot be shared "
                                                               "equally by the 4 data ranks (--dp 2 x --sharding 1 "
                                                               "x --ep 2)"),
])
def test_usage_errors_come_before_any_rank_starts(argv, message, tmp_path, capsys, monkeypatch):
    from oarlock_train import parallel
    monkeypatch.setattr(parallel, "launch", lambda *a: pytest.fail("a rank was started"))
    assert command.main([*SMALL, "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oarlock train: error: argument --") and message in err, err


@pytest.mark.parametrize("argv, accepts", [(["--moe-experts", "-1"], "an integer >= 0"),
                                           (["--moe-top-k", "0"], "a positive integer"),
                                           (["--moe-aux-weight", "-0.1"], "a number >= 0"),
                                           (["--ep", "x"], "a positive integer")])
def test_option_values_are_checked(argv, accepts, capsys):
    with pytest.raises(SystemExit) as exc:
        command.main(argv)
    assert exc.value.code == 2 and f"expected {accepts}" in capsys.readouterr().err


def test_help_tells_the_moe_options():
    text = command.build_parser().format_help()
    for option in ("--moe-experts E", "--moe-top-k K", "--moe-aux-weight W", "--moe-expert-hidden H", "--ep N",
                   "MoELayer", "GShardGate", "train/aux_loss", "ep_degree"):
        assert option in text, option
    assert command.DEFAULT_AUX_WEIGHT == moe_model.DEFAULT_AUX_WEIGHT
