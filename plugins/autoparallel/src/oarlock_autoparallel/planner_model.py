"""The planner's model description: the GPT `oarlock train` trains (byte-level, untied head, RMSNorm, fused qkv
with biases, SiLU MLP of mlp_ratio x width, optionally a mixture of experts in every block) and the workload of
one step (batch rows x seq_len tokens).

`parse_model` reads `--model`: a preset name (tiny, small, medium), key=value pairs, or a preset followed by
key=value overrides ("small,batch=32"). oarlock train builds the GPT at width 128, 4 layers, 4 heads, vocab 256
only, so the presets differ in the step's workload (batch and sequence length); other widths can be planned but
not launched (ModelSpec.launchable).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

FLOAT_BYTES = 4            # oarlock train runs in float32
CORPUS_TOKENS = 205_413    # bytes of the stdlib docstring corpus oarlock train holds (as int64 rows) on every rank
TRAIN_GPT = {"vocab": 256, "width": 128, "layers": 4, "heads": 4, "mlp_ratio": 4}   # model.GPTConfig's defaults


@dataclass(frozen=True)
class ModelSpec:
    """One GPT and the step it trains on: `batch` rows of `seq_len` tokens. experts > 0: every block's MLP is a
    mixture of `experts` experts of the dense MLP's shape, each token routed to `top_k` of them."""

    width: int = 128
    layers: int = 4
    heads: int = 4
    vocab: int = 256
    seq_len: int = 128
    batch: int = 16
    mlp_ratio: int = 4
    experts: int = 0
    top_k: int = 2

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            least = 0 if f.name == "experts" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"plan(): model field {f.name!r} must be an integer >= {least}, got {value!r}")
        if self.width % self.heads or (self.width // self.heads) % 2:
            raise ValueError(f"plan(): model width {self.width} must split into {self.heads} heads of an even width")
        if self.experts and self.top_k > self.experts:
            raise ValueError(f"plan(): model top_k {self.top_k} exceeds experts {self.experts}")

    @property
    def hidden(self) -> int:
        return self.mlp_ratio * self.width

    @property
    def launchable(self) -> bool:
        """Whether `oarlock train` can train this GPT (it has options for the workload and experts only)."""
        return all(getattr(self, key) == value for key, value in TRAIN_GPT.items())

    def block_parameters(self, mp: int = 1, ep: int = 1) -> int:
        """Parameters of one transformer block held by one rank of an mp-way tensor-parallel (and ep-way
        expert-parallel) split: the column-parallel weights and biases and row-parallel weights are split, the
        row-parallel biases and the norms replicated."""
        w, h = self.width, self.hidden
        attn = (w * 3 * w + 3 * w) // mp + (w * w) // mp + w
        mlp = (w * h + h) // mp + (h * w) // mp + w
        if self.experts:
            mlp = mlp * self.experts // ep + w * self.experts          # the experts, and the gate's weight
        return attn + mlp + 2 * w

    def parameter_sizes(self, mp: int = 1) -> list[int]:
        """The element count of each parameter tensor one rank of an mp-way split holds, in the model's order
        (embedding, per block: norm, qkv weight and bias, projection weight and bias, norm, MLP weights and biases;
        final norm, head): what sharding stage 1 reduces and broadcasts one tensor at a time. Dense models only."""
        w, h = self.width, self.hidden
        block = [w, w * 3 * w // mp, 3 * w // mp, w * w // mp, w, w, w * h // mp, h // mp, h * w // mp, w]
        return [self.vocab * w // mp] + block * self.layers + [w, w * self.vocab // mp]

    def parameters(self, mp: int = 1, ep: int = 1, blocks: int | None = None, embed: bool = True,
                   head: bool = True) -> int:
        """Parameters one rank holds: `blocks` blocks (default all), the vocabulary-parallel embedding and the
        final norm with the head when asked."""
        blocks = self.layers if blocks is None else blocks
        total = blocks * self.block_parameters(mp, ep)
        total += self.vocab * self.width // mp if embed else 0
        total += self.width + self.width * self.vocab // mp if head else 0
        return total

    def describe(self) -> str:
        moe = f", {self.experts} experts top-{self.top_k}" if self.experts else ""
        return (f"GPT width {self.width}, {self.layers} layers, {self.heads} heads, vocab {self.vocab}{moe} "
                f"({self.parameters():,} parameters); step of {self.batch} x {self.seq_len} tokens")

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS = {
    "tiny": ModelSpec(batch=8, seq_len=64),
    "small": ModelSpec(batch=16, seq_len=128),
    "medium": ModelSpec(batch=32, seq_len=256),
}
KEYS = {"width": "width", "layers": "layers", "heads": "heads", "vocab": "vocab", "seq_len": "seq_len",
        "seq-len": "seq_len", "batch": "batch", "batch_size": "batch", "mlp_ratio": "mlp_ratio",
        "experts": "experts", "top_k": "top_k"}


def parse_model(text) -> ModelSpec:
    """A ModelSpec from a preset name, comma-separated key=value pairs, or both ("small,batch=32"); a ModelSpec
    or a dict of its fields passes through."""
    if isinstance(text, ModelSpec):
        return text
    if isinstance(text, dict):
        return ModelSpec(**{KEYS.get(k, k): v for k, v in text.items()})
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"plan(): argument model: expected a preset ({', '.join(PRESETS)}) or key=value pairs, "
                         f"got {text!r}")
    spec, overrides = PRESETS["small"], {}
    for i, item in enumerate(part.strip() for part in text.split(",")):
        if "=" not in item:
            if i or item not in PRESETS:
                raise ValueError(f"plan(): argument model: {item!r} is not a preset ({', '.join(PRESETS)}) "
                                 f"nor a key=value pair (keys: {', '.join(sorted(set(KEYS.values())))})")
            spec = PRESETS[item]
            continue
        key, value = (s.strip() for s in item.split("=", 1))
        if key not in KEYS:
            raise ValueError(f"plan(): argument model: unknown key {key!r}; keys: "
                             f"{', '.join(sorted(set(KEYS.values())))}")
        try:
            overrides[KEYS[key]] = int(value)
        except ValueError:
            raise ValueError(f"plan(): argument model: {key} must be an integer, got {value!r}") from None
    return replace(spec, **overrides)
