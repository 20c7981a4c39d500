"""Quantized inference of the trained GPT: validation loss with every Linear's weight quantized by
oarlock.nn.quant, against float32.

The model is the one `oarlock train` wrote (model.safetensors in --checkpoint; without it this script first runs
`oarlock train` with its defaults into that directory, about 2 minutes on 2 cores). Each Linear is replaced by a
layer computing, with its weight quantized once:

| method | weight | activations | function |
|---|---|---|---|
| float32 | float32 | float32 | the model as trained |
| weight_only_int8 | int8, one scale per output channel | float32 | weight_only_linear |
| weight_only_int4 (group 128) | int4, one scale per 128 inputs and output | float32 | weight_only_linear |
| w4afp8 (group 128) | int4, one scale per 128 inputs and output | float8 e4m3, 1 x 128 blocks | w4afp8_linear |
| w4a8 (group 128) | int4, as above | int8, one scale per token | w4a8_linear |

and reports the validation loss over the whole validation split (the trainer's evaluate) and the weight bytes of
the linears. Writes table.md to --out and prints it.

    python bench/fp8_quant_inference.py --checkpoint oarlock-train-out
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import oarlock
import oarlock.nn as nn

METHODS = {   # name -> (weight_quantize algo, group_size, linear, bits per weight)
    "weight_only_int8": ("weight_only_int8", -1, "weight_only", 8),
    "weight_only_int4 (group 128)": ("weight_only_int4", 128, "weight_only", 4),
    "w4afp8 (group 128)": ("w4afp8", 128, "w4afp8", 4),
    "w4a8 (group 128)": ("w4a8", 128, "w4a8", 4),
}


class QuantizedLinear(nn.Layer):
    """A Linear whose weight [in, out] is quantized once by weight_quantize and applied by the method's linear."""

    def __init__(self, linear, algo, group_size, kind):
        super().__init__()
        from oarlock.nn import quant
        self.q, self.scale = quant.weight_quantize(linear.weight.detach(), algo=algo, group_size=group_size)
        self.bias, self.group_size, self.kind, self.quant = linear.bias, group_size, kind, quant
        self.weight_dtype = "int4" if algo == "weight_only_int4" else "int8"
        self.weight_bytes = int(self.q.size) + 4 * int(self.scale.size)

    def forward(self, x):
        if self.kind == "weight_only":
            return self.quant.weight_only_linear(x, self.q, self.bias, weight_scale=self.scale,
                                                 weight_dtype=self.weight_dtype, group_size=self.group_size)
        fn = self.quant.w4afp8_linear if self.kind == "w4afp8" else self.quant.w4a8_linear
        return fn(x, self.q, self.scale, self.bias, group_size=self.group_size)


def quantize_linears(model, algo, group_size, kind) -> int:
    """Replace every nn.Linear under model in place; returns the quantized weights' bytes (codes and scales)."""
    total = 0
    for layer in [model] + list(model.sublayers()):
        for name, child in list(layer.named_children()):
            if type(child) is nn.Linear:
                quantized = QuantizedLinear(child, algo, group_size, kind)
                total += quantized.weight_bytes
                setattr(layer, name, quantized)
    return total


def linear_bytes(model) -> int:
    return sum(4 * int(layer.weight.size) for layer in model.sublayers() if type(layer) is nn.Linear)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default="oarlock-train-out", help="an `oarlock train` output directory")
    parser.add_argument("--out", default="fp8-quant-out")
    args = parser.parse_args(argv)
    weights = os.path.join(args.checkpoint, "model.safetensors")
    if not os.path.exists(weights):
        print(f"no {weights}: running `oarlock train --out {args.checkpoint}` first", flush=True)
        subprocess.run([sys.executable, "-m", "oarlock.cli", "train", "--out", args.checkpoint], check=True)
    from oarlock_train.corpus import build_corpus
    from oarlock_train.trainer import TrainConfig, Trainer

    state = oarlock.load(weights)
    trainer = Trainer(TrainConfig(steps=1), build_corpus(128))
    rows = []
    for name, spec in [("float32", None)] + list(METHODS.items()):
        trainer.model.set_state_dict(state)
        if spec is None:
            size = linear_bytes(trainer.model)
        else:
            size = quantize_linears(trainer.model, *spec[:3])
        loss = trainer.evaluate()
        rows.append((name, loss, size))
        print(f"{name}: validation loss {loss:.4f} nats/byte, linear weights {size / 1024:.0f} KiB", flush=True)
        if spec is not None:   # a fresh model for the next method (the linears were replaced)
            trainer = Trainer(TrainConfig(steps=1), trainer.corpus)
    base = rows[0][1]
    text = "\n".join(["| method | validation loss (nats/byte) | vs float32 | linear weights (KiB) |",
                      "|---|---|---|---|"]
                     + [f"| {n} | {v:.4f} | {v - base:+.4f} | {b / 1024:.0f} |" for n, v, b in rows]) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
