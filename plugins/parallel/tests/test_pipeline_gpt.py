"""examples/hybrid_gpt.py under pipeline parallelism: the same GPT from the same full weights, expressed as a
PipelineLayer of LayerDescs and trained 20 steps by PipelineParallel.train_batch, must give per-step losses
equal to one process within 1e-5 relative (float32), and its eval_batch loss on an unseen batch must equal the
one-process forward's.

The reference of the untied layouts is the plain one-process GPT (test_hybrid_gpt.py checks it against PyTorch
float64); the tied layouts (--tie-embeddings, a SharedLayerDesc embedding / LM head on the first and last stage)
are a different model, whose reference is the one-process PipelineLayer with the same tie (itself checked against
the PyTorch float64 oracle of test_hybrid_gpt.py with the head tied). Each layout is a real
`python -m oarlock.cli launch -n N` job; to keep the launches few (each costs seconds of start-up), each layout
combines several features, and together they cover pp2, pp4, pp2 x dp2, pp2 x mp2, FThenB and 1F1B, dict inputs,
the tied embedding, recompute on and off. A layout is (ranks, flags, tied); other schedules add their layouts to
LAYOUTS.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from parallel_jobs import save_gpt_init, train_gpt

pytest.importorskip("mpi4py")

RTOL = 1e-5

# layout: (ranks, the example's flags, whether the embedding is tied)
LAYOUTS = {
    "pp2_fthenb_dict_recompute_tied": (2, ["--pp", "2", "--schedule", "FThenB", "--micro-batches", "2",
                                           "--dict-inputs", "--recompute", "--tie-embeddings"], True),
    "pp4_1f1b": (4, ["--pp", "4", "--schedule", "1F1B", "--micro-batches", "4"], False),
    "pp2_dp2_fthenb_dict": (4, ["--pp", "2", "--dp", "2", "--schedule", "FThenB", "--micro-batches", "2",
                                "--dict-inputs"], False),
    "pp2_mp2_1f1b_tied_recompute": (4, ["--pp", "2", "--mp", "2", "--schedule", "1F1B", "--micro-batches", "2",
                                        "--tie-embeddings", "--recompute"], True),
    # SCHED's schedules: interleaved 1F1B (2 chunks per stage, one layer each) and 1F1B with activation swap
    "pp2_vpp2_dict": (2, ["--pp", "2", "--vpp", "2", "--schedule", "VPP", "--micro-batches", "4", "--dict-inputs"],
                      False),
    "pp3_1f1boffload_tied": (3, ["--pp", "3", "--schedule", "1F1BOffload", "--micro-batches", "4",
                                 "--tie-embeddings"], True),      # stage 0 swaps (1F1B holds 3 there)
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pipeline_gpt")


@pytest.fixture(scope="module")
def init(workdir) -> Path:
    return save_gpt_init(workdir)


@pytest.fixture(scope="module")
def references(init, workdir) -> dict:
    """{tied: the one-process run}: the plain GPT, and the one-process PipelineLayer with the tied embedding."""
    return {False: train_gpt(1, [], init, workdir / "reference.json"),
            True: train_gpt(1, ["--tie-embeddings"], init, workdir / "reference_tied.json")}


def test_tied_reference_matches_torch_float64(references, init):
    from test_hybrid_gpt import _torch_training      # the untied GPT's PyTorch oracle, with the head tied
    np.testing.assert_allclose(references[True]["losses"], _torch_training(init, tied=True), rtol=RTOL)


def test_tied_reference_is_another_model_that_learns(references):
    plain, tied = references[False]["losses"], references[True]["losses"]
    assert tied[-1] < 0.7 * tied[0], tied
    assert abs(tied[0] - plain[0]) > 1e-3, "the tied head must change the model"


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_equal_losses(layout, references, init, workdir):
    ranks, flags, tied = LAYOUTS[layout]
    got = train_gpt(ranks, flags, init, workdir / f"{layout}.json")
    want = references[tied]
    assert got["layout"]["world"] == ranks and got["layout"]["pp"] == int(flags[flags.index("--pp") + 1])
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=RTOL, atol=0,
                               err_msg=f"{layout}: per-step losses differ from one process")
    np.testing.assert_allclose(got["eval_loss"], want["eval_loss"], rtol=RTOL, atol=0,
                               err_msg=f"{layout}: eval_batch's loss differs from the one-process forward")

