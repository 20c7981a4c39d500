"""Memory of FP8 training per recipe, for the GPT of `oarlock train` (batch 16 x 128, its default).

One training step runs per recipe with every Linear an Fp8Linear; a hook records the shapes each linear sees.
From those shapes the table counts what a GPU implementation of the recipe holds for the linears:

- weights: the float32 master weight (4 B) plus its float8 copy (1 B) and the copy's scales: one float32 per
  tensor (per-tensor recipes), one per 128 x 128 tile (blockwise); DelayedScaling adds its amax histories
  (3 roles x amax_history_len float32 per layer); bf16 autocast holds a bf16 copy (2 B) instead;
- activations saved for backward (each linear's input): 4 B (float32), 2 B (bf16), 1 B plus scales (FP8);
  the blockwise recipe keeps the input twice, quantized along K for the forward and along the tokens for dW
  (1 x 128 blocks each: 1 B + 4 B / 128 per element, twice), as DeepSeek-V3 and TransformerEngine's block
  recipe do.

It also prints the measured peak host memory and time of the step in this process. On the CPU the FP8 GEMMs
are emulated in numpy on float32 values (exact e4m3/e5m2 rounding), so the measured memory does not shrink and
the step is slower than float32: those two columns show the emulation's cost, not FP8's; GPU figures need a GPU
run (not made here).

    python bench/fp8.py
"""

from __future__ import annotations

import time

import oarlock

RECIPES = ("float32", "bf16", "delayed", "current", "blockwise")
MIB = 1024 * 1024


def _shapes_of_one_step(recipe: str, corpus):
    """[(layer id, x rows, in, out)] of every linear call of one training step, the measured peak bytes and
    seconds."""
    from oarlock.incubate.fp8 import Fp8Linear
    from oarlock_train.trainer import TrainConfig, Trainer

    fp8 = recipe if recipe in ("delayed", "current", "blockwise") else None
    trainer = Trainer(TrainConfig(steps=10, fp8=fp8), corpus)
    calls = []
    layers = [m for m in trainer.model.sublayers() if isinstance(m, (Fp8Linear, oarlock.nn.Linear))]
    hooks = [m.register_forward_post_hook(lambda layer, inputs, out: calls.append(
        (id(layer), inputs[0].size // layer.in_features, layer.in_features, layer.out_features))) for m in layers]
    if recipe == "bf16":
        model = trainer.model

        def forward(tokens, startend_row_indices=None):
            with oarlock.amp.auto_cast(dtype="bfloat16"):
                return model(tokens, startend_row_indices)
        trainer.wrapped = forward
    trainer.train_step()                         # warm: first-use costs out of the measurement
    calls.clear()
    oarlock.device.reset_max_memory_allocated()
    before = oarlock.device.memory_allocated()
    start = time.perf_counter()
    trainer.train_step()
    seconds = time.perf_counter() - start
    peak = oarlock.device.max_memory_allocated() - before
    for h in hooks:
        h.remove()
    return calls, peak, seconds


def format_bytes(recipe: str, calls) -> tuple[int, int]:
    """(weight bytes, saved-activation bytes) of the linears under the recipe (see the module docstring)."""
    weights = {layer: (k, n) for layer, _, k, n in calls}.values()
    w_elems = sum(k * n for k, n in weights)
    x_elems = sum(r * k for _, r, k, _ in calls)
    tiles = sum(-(-k // 128) * -(-n // 128) for k, n in weights)
    if recipe == "float32":
        return 4 * w_elems, 4 * x_elems
    if recipe == "bf16":
        return 6 * w_elems, 2 * x_elems
    if recipe in ("delayed", "current"):
        from oarlock.incubate.fp8 import DelayedScaling
        history = 3 * DelayedScaling().amax_history_len * 4 if recipe == "delayed" else 0
        return 5 * w_elems + len(weights) * (3 * 4 + history), x_elems + 4 * len(calls)
    x_blocks = sum(r * -(-k // 128) + k * -(-r // 128) for _, r, k, _ in calls)
    return 5 * w_elems + 4 * tiles, 2 * x_elems + 4 * x_blocks


def main() -> int:
    from oarlock_train.corpus import build_corpus
    corpus = build_corpus(128)
    print("| recipe | linear weights (MiB) | saved linear inputs (MiB) | measured step peak, emulation (MiB) | "
          "step seconds, emulation |")
    print("|---|---|---|---|---|")
    for recipe in RECIPES:
        calls, peak, seconds = _shapes_of_one_step(recipe, corpus)
        w, x = format_bytes(recipe, calls)
        print(f"| {recipe} | {w / MIB:.2f} | {x / MIB:.2f} | {peak / MIB:.1f} | {seconds:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
