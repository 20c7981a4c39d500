"""The train GPT as a PipelineLayer (`oarlock train --pp P [--vpp V]`): the same layers and parameter names as
model.GPT, split into stages.

Descriptions: EmbedPipe (token embedding and dropout), one BlockPipe per block, HeadPipe (final RMSNorm and
output head); the value passed between stages is the hidden state [b, s, width], or with the document mask
the tuple (hidden, startend_row_indices), the int32 FlashMask mask each block needs (no gradient). Every block
holds its own rotary tables (constants, not persistable). Each rank builds only its stages' layers and
takes their weights from the full one-process GPT (same seed), so every layout starts from the one-process
weights; `full_names` maps a stage's parameter back to its model.GPT name.
"""

from __future__ import annotations

import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock_train.model import Block, GPTConfig, rotary_tables


def _split(value):
    return value if isinstance(value, tuple) else (value, None)


def _join(x, mask):
    return x if mask is None else (x, mask)


class EmbedPipe(nn.Layer):
    """tokens [b, s] (or (tokens, mask)) -> the embedded hidden state (with the mask)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.width)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, value):
        tokens, mask = _split(value)
        return _join(self.drop(self.embed(tokens)), mask)


class BlockPipe(Block):
    """model.Block over what the stages pass, with its own rotary tables."""

    def __init__(self, cfg: GPTConfig):
        super().__init__(cfg)
        cos, sin = rotary_tables(cfg.max_seq_len, cfg.width // cfg.heads, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistable=False)
        self.register_buffer("rope_sin", sin, persistable=False)

    def forward(self, value):
        x, mask = _split(value)
        seq = x.shape[1]
        return _join(super().forward(x, self.rope_cos[:, :seq], self.rope_sin[:, :seq], mask), mask)


class HeadPipe(nn.Layer):
    """The final RMSNorm and the output head -> logits [b, s, vocab]."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm = nn.RMSNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab_size, bias_attr=False)

    def forward(self, value):
        return self.head(self.norm(_split(value)[0]))


class PipeLoss(nn.Layer):
    """The pipeline's loss_fn: mean next-byte cross entropy of logits [b, s, vocab] against labels [b, s]."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, logits, labels):
        return F.cross_entropy(logits.reshape([-1, self.vocab_size]), labels.reshape([-1]))


def descriptions(cfg: GPTConfig) -> list:
    from oarlock.distributed.fleet.meta_parallel import LayerDesc
    return [LayerDesc(EmbedPipe, cfg), *[LayerDesc(BlockPipe, cfg) for _ in range(cfg.layers)],
            LayerDesc(HeadPipe, cfg)]


def prefixes(cfg: GPTConfig) -> list:
    """model.GPT's name prefix of each description's parameters."""
    return ["", *[f"blocks.{i}." for i in range(cfg.layers)], ""]


def build(cfg: GPTConfig, hcg, vpp: int, recompute: bool):
    """This rank's stages as a PipelineLayer over hcg's topology."""
    from oarlock.distributed.fleet.meta_parallel import PipelineLayer
    return PipelineLayer(descriptions(cfg), topology=hcg.topology(), loss_fn=PipeLoss(cfg.vocab_size),
                         num_virtual_pipeline_stages=vpp if vpp > 1 else None,
                         recompute_interval=1 if recompute else 0,
                         recompute_ctx={"preserve_rng_state": True} if recompute else None)


_PIPES = (EmbedPipe, BlockPipe, HeadPipe)


def local_layers(pipeline) -> list:
    """(description index, layer) of every layer this rank built: PipelineLayer names each built layer by its
    description's index (under a chunk's name with virtual stages)."""
    return [(int(name.rsplit(".", 1)[-1]), layer) for name, layer in pipeline.named_sublayers()
            if isinstance(layer, _PIPES)]


def full_names(pipeline, cfg: GPTConfig) -> dict:
    """{id(parameter): its model.GPT name} for this rank's parameters, and the local state key of each name."""
    names = prefixes(cfg)
    return {id(p): names[index] + key for index, layer in local_layers(pipeline)
            for key, p in layer.named_parameters()}


def load_full(pipeline, cfg: GPTConfig, full_state: dict) -> None:
    """Each local layer takes its weights from the full model.GPT state dict."""
    names = prefixes(cfg)
    for index, layer in local_layers(pipeline):
        own = {key: full_state[names[index] + key] for key in layer.state_dict() if names[index] + key in full_state}
        layer.set_state_dict(own)


def local_state(pipeline, cfg: GPTConfig) -> dict:
    """This rank's weights under their model.GPT names."""
    names = prefixes(cfg)
    return {names[index] + key: value for index, layer in local_layers(pipeline)
            for key, value in layer.state_dict().items()}


def rows_to_data(rows, document_mask: bool):
    """PipelineParallel's data=(inputs, labels) of rows [b, s + 1]: (tokens or (tokens, mask), next bytes)."""
    from oarlock_train.model import document_mask_of
    tokens = rows[:, :-1]
    inputs = (tokens, document_mask_of(tokens)) if document_mask else tokens
    return inputs, rows[:, 1:]
