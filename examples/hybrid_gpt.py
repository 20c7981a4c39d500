"""A small GPT trained with hybrid parallelism, written only with Paddle's fleet API (`import oarlock as paddle`).

The model is GPT-2 style: token embeddings (VocabParallelEmbedding, the vocabulary split over mp) plus
learned position embeddings, pre-LayerNorm blocks of causal softmax attention and a GELU MLP, a final
LayerNorm, a vocabulary-parallel head (ColumnParallelLinear, gather_output=False: each mp rank holds
vocab/mp logits) and ParallelCrossEntropy (the softmax is never gathered); dropout 0.

Tensor parallel (--mp N), Megatron's layout: attention is one fused qkv ColumnParallelLinear whose columns
are grouped per head ([heads, 3, head_dim]), so each mp rank holds heads/mp whole heads, followed by a
RowParallelLinear(input_is_parallel=True); the MLP is ColumnParallelLinear -> GELU -> RowParallelLinear.
Sequence parallel (--sp, needs --mp > 1): activations are [s, b, h]; ScatterOp splits the sequence over
mp after the embedding, the linears become ColumnSequenceParallelLinear / RowSequenceParallelLinear
(all-gather before, reduce-scatter after), and the LayerNorms, which now see only s/mp positions, have
their parameters marked with mark_as_sequence_parallel_parameter so that
register_sequence_parallel_allreduce_hooks sums their gradients over mp.
Data-parallel-like axes: --dp N (fleet dp_degree), --sharding N (fleet sharding_degree: stage 1,
optimizer states partitioned), or --group-sharded os|os_g|p_g_os (paddle.distributed.sharding.
group_sharded_parallel over the whole world instead of fleet's strategies). The ranks of those axes each
take an equal share of a fixed global batch (--batch), so every step's loss, the mean over the global
batch (averaged over the ranks), is the loss one process computes on the whole batch.

Training: AdamW with ClipGradByGlobalNorm (--clip-norm) through fleet.distributed_model /
fleet.distributed_optimizer. The data are sequences counting mod --vocab with a random start and stride
(so the loss falls), the same global batch on every rank for a given --seed and step.

    oarlock launch -n 4 examples/hybrid_gpt.py --dp 2 --mp 2
    oarlock launch -n 4 examples/hybrid_gpt.py --mp 2 --sp --sharding 2
    oarlock launch -n 4 examples/hybrid_gpt.py --group-sharded p_g_os
    python examples/hybrid_gpt.py --save-init init.pdparams          # the full initial weights, 1 process
    oarlock launch -n 2 examples/hybrid_gpt.py --mp 2 --init init.pdparams --json losses.json

--init makes every layout start from the same model: every rank loads the FULL weights and keeps its mp
slice (slice_full_state: each tensor-parallel layer's split axis), before the model is wrapped.

Pipeline parallel (--pp N, fleet pp_degree): the same GPT as a PipelineLayer of LayerDescs (embedding,
one description per block, final LayerNorm + head), split uniformly over the stages and trained by
PipelineParallel.train_batch on --micro-batches micro-batches (accumulate_steps) under --schedule (FThenB,
1F1B, ...; pipeline_configs.schedule_mode). --vpp N gives each stage N model chunks (interleaved schedules),
--recompute recomputes every layer in backward (recompute_interval 1), --dict-inputs makes the stages pass
a dict {"hidden": activations, "positions": int64 ids with stop_gradient} instead of a tensor, and
--tie-embeddings ties the LM head to the token embedding (a SharedLayerDesc on the first and last stage;
a different model: its one-process reference is `--tie-embeddings` on one process). Any of these flags on
one process runs the PipelineLayer as a plain model (pp_degree 1), the reference of the pipeline layouts.
--pp combines with --dp and --mp (not with --sp, --sharding or --group-sharded).

    oarlock launch -n 2 examples/hybrid_gpt.py --pp 2 --micro-batches 4 --schedule FThenB --dict-inputs
    oarlock launch -n 4 examples/hybrid_gpt.py --pp 2 --mp 2 --tie-embeddings --recompute
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

import numpy as np

import oarlock as paddle
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed import fleet
from oarlock.distributed.fleet.meta_parallel import (ColumnParallelLinear, ParallelCrossEntropy, RowParallelLinear,
                                                     VocabParallelEmbedding)

GROUP_SHARDED_LEVELS = ("os", "os_g", "p_g_os")


def _sequence_parallel_utils():
    """Paddle's fleet.utils.sequence_parallel_utils, imported only when --sp asks for it."""
    from oarlock.distributed.fleet.utils import sequence_parallel_utils
    return sequence_parallel_utils


def _normal():
    return nn.initializer.Normal(mean=0.0, std=0.02)      # GPT-2's initialisation


class Attention(nn.Layer):
    """Causal multi-head self-attention; each mp rank computes heads/mp whole heads."""

    def __init__(self, width: int, heads: int, mp: int, sp: bool):
        super().__init__()
        if heads % mp:
            raise ValueError(f"Attention: heads ({heads}) must be divisible by the model-parallel degree ({mp})")
        self.local_heads, self.head_dim, self.sp = heads // mp, width // heads, sp
        if sp:
            spu = _sequence_parallel_utils()
            self.qkv = spu.ColumnSequenceParallelLinear(width, 3 * width, weight_attr=_normal(), has_bias=True,
                                                        gather_output=False)
            self.out = spu.RowSequenceParallelLinear(width, width, weight_attr=_normal(), has_bias=True,
                                                     input_is_parallel=True)
        else:
            self.qkv = ColumnParallelLinear(width, 3 * width, weight_attr=_normal(), has_bias=True,
                                            gather_output=False)
            self.out = RowParallelLinear(width, width, weight_attr=_normal(), has_bias=True, input_is_parallel=True)

    def forward(self, x):
        qkv = self.qkv(x)                        # [b, s, 3h/mp], or [s, b, 3h/mp] with sp
        if self.sp:
            qkv = paddle.transpose(qkv, [1, 0, 2])
        b, s = qkv.shape[0], qkv.shape[1]
        qkv = paddle.reshape(qkv, [b, s, self.local_heads, 3, self.head_dim])
        qkv = paddle.transpose(qkv, [3, 0, 2, 1, 4])           # [3, b, heads, s, head_dim]
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = paddle.matmul(q, k, transpose_y=True) / math.sqrt(self.head_dim)
        future = paddle.triu(paddle.ones([s, s], dtype="bool"), diagonal=1)
        scores = paddle.where(future, paddle.full_like(scores, -1e9), scores)
        context = paddle.matmul(F.softmax(scores, axis=-1), v)   # [b, heads, s, head_dim]
        context = paddle.transpose(context, [2, 0, 1, 3] if self.sp else [0, 2, 1, 3])
        return self.out(paddle.reshape(context, [context.shape[0], context.shape[1], -1]))


class MLP(nn.Layer):
    def __init__(self, width: int, sp: bool):
        super().__init__()
        if sp:
            spu = _sequence_parallel_utils()
            self.fc1 = spu.ColumnSequenceParallelLinear(width, 4 * width, weight_attr=_normal(), has_bias=True,
                                                        gather_output=False)
            self.fc2 = spu.RowSequenceParallelLinear(4 * width, width, weight_attr=_normal(), has_bias=True,
                                                     input_is_parallel=True)
        else:
            self.fc1 = ColumnParallelLinear(width, 4 * width, weight_attr=_normal(), has_bias=True,
                                            gather_output=False)
            self.fc2 = RowParallelLinear(4 * width, width, weight_attr=_normal(), has_bias=True,
                                         input_is_parallel=True)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=True))


class Block(nn.Layer):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, width: int, heads: int, mp: int, sp: bool):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn, self.mlp = Attention(width, heads, mp, sp), MLP(width, sp)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Layer):
    """tokens [b, s] -> this mp rank's slice of the logits: [b, s, vocab/mp], or [s, b, vocab/mp] with sp."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq_len: int, mp: int, sp: bool):
        super().__init__()
        self.sp = sp
        self.embed = VocabParallelEmbedding(vocab, width, weight_attr=_normal())
        self.position = nn.Embedding(seq_len, width, weight_attr=_normal())
        self.blocks = nn.LayerList([Block(width, heads, mp, sp) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        if sp:
            spu = _sequence_parallel_utils()
            self.head = spu.ColumnSequenceParallelLinear(width, vocab, weight_attr=_normal(), has_bias=False,
                                                         gather_output=False)
            for layer in self.sublayers():       # LayerNorms see s/mp positions: their gradients are partial
                if isinstance(layer, nn.LayerNorm):
                    for param in layer.parameters():
                        spu.mark_as_sequence_parallel_parameter(param)
        else:
            self.head = ColumnParallelLinear(width, vocab, weight_attr=_normal(), has_bias=False, gather_output=False)

    def forward(self, tokens):
        positions = paddle.arange(tokens.shape[1], dtype="int64")
        x = self.embed(tokens) + self.position(positions)      # [b, s, h], replicated over mp
        if self.sp:
            x = _sequence_parallel_utils().ScatterOp.apply(paddle.transpose(x, [1, 0, 2]))   # [s/mp, b, h]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class EmbeddingPipe(nn.Layer):
    """The pipeline's first layer: token + position embeddings -> [b, s, h], or with `as_dict`
    {"hidden": [b, s, h], "positions": [b, s] int64 (no gradient)}."""

    def __init__(self, vocab: int, width: int, seq_len: int, as_dict: bool):
        super().__init__()
        self.as_dict = as_dict
        self.embed = VocabParallelEmbedding(vocab, width, weight_attr=_normal())
        self.position = nn.Embedding(seq_len, width, weight_attr=_normal())

    @property
    def embedding_weight(self):       # the tied parameter (SharedLayerDesc's shared_weight_attr)
        return self.embed.weight

    def forward(self, tokens):
        positions = paddle.arange(tokens.shape[1], dtype="int64")
        x = self.embed(tokens) + self.position(positions)
        if not self.as_dict:
            return x
        return {"hidden": x, "positions": paddle.expand(positions, [tokens.shape[0], tokens.shape[1]])}


def _hidden(value):
    return value["hidden"] if isinstance(value, dict) else value


class BlockPipe(Block):
    """A Block taking and giving what the stages pass (a tensor, or the dict of EmbeddingPipe)."""

    def forward(self, value):
        if not isinstance(value, dict):
            return super().forward(value)
        return {**value, "hidden": super().forward(value["hidden"])}


class NormPipe(nn.Layer):
    """The final LayerNorm (before a tied head)."""

    def __init__(self, width: int):
        super().__init__()
        self.ln_f = nn.LayerNorm(width)

    def forward(self, value):
        return self.ln_f(_hidden(value))


class HeadPipe(NormPipe):
    """The final LayerNorm and the vocabulary-parallel head (untied)."""

    def __init__(self, width: int, vocab: int):
        super().__init__(width)
        self.head = ColumnParallelLinear(width, vocab, weight_attr=_normal(), has_bias=False, gather_output=False)

    def forward(self, value):
        return self.head(super().forward(value))


def tied_head(embedding: EmbeddingPipe, x):
    """The LM head with the token embedding's weight: x @ W^T, W this mp rank's [vocab/mp, h] rows (as
    ColumnParallelLinear, the input's gradient is summed over the model-parallel group)."""
    if embedding.embed.world_size > 1:
        from oarlock.distributed.fleet.layers.mpu.mp_ops import _c_identity
        x = _c_identity(x, group=embedding.embed.model_parallel_group)
    return paddle.matmul(x, embedding.embedding_weight, transpose_y=True)


class GPTLoss(nn.Layer):
    """ParallelCrossEntropy over this mp rank's logits, averaged: the pipeline's loss_fn."""

    def __init__(self):
        super().__init__()
        self.criterion = ParallelCrossEntropy()

    def forward(self, logits, labels):
        return self.criterion(logits, labels).mean()


def pipeline_descs(args, mp: int) -> list:
    """The GPT as layer descriptions: embedding, the blocks, final norm and head (tied: a SharedLayerDesc)."""
    from oarlock.distributed.fleet.meta_parallel import LayerDesc, SharedLayerDesc
    embedding = (args.vocab, args.width, args.seq_len, args.dict_inputs)
    blocks = [LayerDesc(BlockPipe, args.width, args.heads, mp, False) for _ in range(args.layers)]
    if not args.tie_embeddings:
        return [LayerDesc(EmbeddingPipe, *embedding), *blocks, LayerDesc(HeadPipe, args.width, args.vocab)]
    return [SharedLayerDesc("embed", EmbeddingPipe, None, "embedding_weight", *embedding), *blocks,
            LayerDesc(NormPipe, args.width),
            SharedLayerDesc("embed", EmbeddingPipe, tied_head, "embedding_weight", *embedding)]


def pipeline_full_names(args) -> list:
    """The one-process GPT's name prefix of each description of pipeline_descs (None: the tied head)."""
    blocks = [f"blocks.{i}." for i in range(args.layers)]
    if not args.tie_embeddings:
        return ["", *blocks, ""]
    return ["", *blocks, "", None]


def load_pipeline_state(model, full_state: dict, args, mp_rank: int, mp_degree: int) -> None:
    """Each layer this rank built takes its weights (its mp slice) from the FULL one-process GPT state."""
    names = pipeline_full_names(args)
    chunks = model.get_model_chunks() or [model]
    for chunk, start in zip(chunks, model._start_poss):
        for offset, function in enumerate(chunk.run_function):
            prefix = names[start + offset]
            if prefix is None:
                continue
            layer = function.args[0] if isinstance(function, functools.partial) else function
            own = {key: full_state[prefix + key] for key in layer.state_dict() if prefix + key in full_state}
            layer.set_state_dict(slice_full_state(layer, own, mp_rank, mp_degree))


# The split axis of each tensor-parallel layer's parameters (Paddle's param.split_axis): weights are [in, out]
def _split_axes():
    axes = {ColumnParallelLinear: {"weight": 1, "bias": 0}, RowParallelLinear: {"weight": 0},
            VocabParallelEmbedding: {"weight": 0}}
    try:
        spu = _sequence_parallel_utils()
    except ImportError:
        return axes
    axes[spu.ColumnSequenceParallelLinear] = {"weight": 1, "bias": 0}
    axes[spu.RowSequenceParallelLinear] = {"weight": 0}
    return axes


def slice_full_state(model: nn.Layer, full_state: dict, mp_rank: int, mp_degree: int) -> dict:
    """This mp rank's state dict from the FULL one (numpy arrays or Tensors by the one-process names):
    parameters of tensor-parallel layers keep slice mp_rank of mp_degree equal slices along their split
    axis, the others are taken whole. Every key must exist and every slice must have the model's shape."""
    split = {}
    axes = _split_axes()
    for prefix, layer in model.named_sublayers():
        for cls, by_name in axes.items():
            if isinstance(layer, cls):
                split.update({f"{prefix}.{name}": axis for name, axis in by_name.items()})
                break
    own = model.state_dict()
    missing = sorted(set(own) - set(full_state))
    if missing:
        raise KeyError(f"slice_full_state(): the full state lacks {missing}")
    state = {}
    for key, mine in own.items():
        full = full_state[key]
        full = full.numpy() if isinstance(full, paddle.Tensor) else np.asarray(full)
        if key in split:
            full = np.split(full, mp_degree, axis=split[key])[mp_rank]
        if list(full.shape) != list(mine.shape):
            raise ValueError(f"slice_full_state(): {key} sliced to {list(full.shape)} for mp rank {mp_rank} of "
                             f"{mp_degree}, but the model's is {list(mine.shape)}")
        state[key] = full
    return state


def global_batch(step: int, seed: int, batch: int, seq_len: int, vocab: int):
    """(tokens, labels), [batch, seq_len] int64 each: x[t+1] = x[t] + stride mod vocab, the same on every rank."""
    rng = np.random.default_rng([seed, step])
    start = rng.integers(0, vocab, size=(batch, 1))
    stride = rng.integers(1, 5, size=(batch, 1))
    sequence = (start + stride * np.arange(seq_len + 1)) % vocab
    return sequence[:, :-1].astype("int64"), sequence[:, 1:].astype("int64")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="The number of ranks must equal dp x sharding x mp (x the group-"
                                            "sharded ranks: --group-sharded uses the whole world and needs "
                                            "--dp, --mp and --sharding at 1).")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel degree (fleet dp_degree; default 1)")
    parser.add_argument("--mp", type=int, default=1, help="tensor-parallel degree (fleet mp_degree; default 1)")
    parser.add_argument("--sharding", type=int, default=1,
                        help="sharding stage 1 degree (fleet sharding_degree: optimizer states partitioned; default 1)")
    parser.add_argument("--sp", action="store_true", help="sequence parallel over the mp group (needs --mp > 1)")
    parser.add_argument("--group-sharded", choices=GROUP_SHARDED_LEVELS, default=None,
                        help="group_sharded_parallel level over the whole world instead of fleet's strategies: "
                             "os / os_g (stage 2) or p_g_os (stage 3)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree (fleet pp_degree; default 1)")
    parser.add_argument("--vpp", type=int, default=1,
                        help="model chunks per pipeline stage (virtual stages; default 1)")
    parser.add_argument("--schedule", default="1F1B",
                        help="pipeline schedule (pipeline_configs.schedule_mode: FThenB, 1F1B, VPP, ...; default 1F1B)")
    parser.add_argument("--micro-batches", type=int, default=1,
                        help="micro-batches per step under --pp (accumulate_steps; micro_batch_size is this rank's "
                             "rows / micro-batches; default 1)")
    parser.add_argument("--recompute", action="store_true", help="recompute every pipeline layer in backward")
    parser.add_argument("--dict-inputs", action="store_true",
                        help="the pipeline stages pass a dict (activations and int64 positions) instead of a tensor")
    parser.add_argument("--tie-embeddings", action="store_true",
                        help="tie the LM head to the token embedding (SharedLayerDesc on the first and last stage)")
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of the initial weights (default 0)")
    parser.add_argument("--batch", type=int, default=8, help="global batch, split over the data-parallel-like "
                                                             "ranks (default 8)")
    parser.add_argument("--seq-len", type=int, default=16, help="sequence length (default 16)")
    parser.add_argument("--vocab", type=int, default=64, help="vocabulary size, divisible by --mp (default 64)")
    parser.add_argument("--width", type=int, default=32, help="hidden size (default 32)")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads, divisible by --mp (default 4)")
    parser.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate (default 1e-2)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (default 0.01)")
    parser.add_argument("--clip-norm", type=float, default=1.0, help="ClipGradByGlobalNorm's clip_norm (default 1.0)")
    parser.add_argument("--json", metavar="OUT", default=None,
                        help="rank 0 writes {'losses': the per-step global-batch losses, 'grad_norms': the "
                             "per-step global gradient norms before clipping (one process only, else null), "
                             "'layout'} to OUT")
    parser.add_argument("--init", metavar="FILE", default=None,
                        help="start from these FULL weights (written by --save-init); every rank takes its mp slice")
    parser.add_argument("--save-init", metavar="FILE", default=None,
                        help="write the full initial weights to FILE and exit (one process)")
    args = parser.parse_args(argv)
    for name in ("dp", "mp", "pp", "vpp", "micro_batches", "sharding", "steps", "batch", "seq_len", "vocab", "width",
                 "layers", "heads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.sp and args.mp < 2:
        parser.error("--sp needs --mp > 1 (Paddle's sequence-parallel linears assert a model-parallel group)")
    if args.sp and args.seq_len % args.mp:
        parser.error(f"--sp splits the sequence over mp: --seq-len {args.seq_len} must be divisible by --mp {args.mp}")
    if args.group_sharded and (args.dp, args.mp, args.sharding) != (1, 1, 1):
        parser.error("--group-sharded shards over the whole world: leave --dp, --mp and --sharding at 1")
    if args.width % args.heads:
        parser.error(f"--width {args.width} must be divisible by --heads {args.heads}")
    if uses_pipeline(args) and (args.sp or args.sharding > 1 or args.group_sharded):
        parser.error("--pp and the pipeline flags combine with --dp and --mp only (not --sp, --sharding or "
                     "--group-sharded)")
    return parser, args


def uses_pipeline(args) -> bool:
    """Whether the GPT is built as a PipelineLayer (any pipeline flag; one process runs it as a plain model)."""
    return args.pp > 1 or args.vpp > 1 or args.recompute or args.dict_inputs or args.tie_embeddings


def init_fleet(args):
    """fleet.init with the asked degrees (group-sharded: every rank data-parallel-like, dp_degree left to fleet)."""
    strategy = fleet.DistributedStrategy()
    if not args.group_sharded:
        strategy.hybrid_configs = {"dp_degree": args.dp, "mp_degree": args.mp, "pp_degree": args.pp,
                                   "sharding_degree": args.sharding}
    if args.pp > 1:
        rows = args.batch // max(args.dp, 1)
        strategy.pipeline_configs = {"accumulate_steps": args.micro_batches, "schedule_mode": args.schedule,
                                     "micro_batch_size": max(rows // args.micro_batches, 1)}
    strategy.tensor_parallel_configs = {"tensor_init_seed": args.seed}
    fleet.init(is_collective=True, strategy=strategy)
    return fleet.get_hybrid_communicate_group()


def data_share(args, hcg) -> tuple[int, int]:
    """(index, count) of this rank among the ranks that take different data (dp x sharding, or the world)."""
    if args.group_sharded:
        return dist.get_rank(), dist.get_world_size()
    sharding = hcg.get_sharding_parallel_world_size()
    return hcg.get_data_parallel_rank() * sharding + hcg.get_sharding_parallel_rank(), \
        hcg.get_data_parallel_world_size() * sharding


def build_model(args, mp_rank: int, mp_degree: int) -> GPT:
    """This rank's GPT (seeded by --seed; its mp slice of --init's full weights if given), with the
    sequence-parallel gradient hooks registered under --sp."""
    paddle.seed(args.seed)
    model = GPT(args.vocab, args.width, args.layers, args.heads, args.seq_len, mp=mp_degree, sp=args.sp)
    if args.init:
        model.set_state_dict(slice_full_state(model, paddle.load(args.init), mp_rank, mp_degree))
    if args.sp:
        _sequence_parallel_utils().register_sequence_parallel_allreduce_hooks(
            model, accumulation_steps=1, fuse_sequence_parallel_allreduce=False)
    return model


def build_optimizer(args, model):
    """AdamW with global-norm clipping over the model's parameters (not yet distributed)."""
    return paddle.optimizer.AdamW(learning_rate=args.lr, parameters=model.parameters(),
                                  weight_decay=args.weight_decay,
                                  grad_clip=nn.ClipGradByGlobalNorm(clip_norm=args.clip_norm))


def distribute(args, model, optimizer, segment_size: int = 2**20):
    """(model, optimizer) wrapped by group_sharded_parallel (--group-sharded; segment_size: stage 3's, the
    largest parameter, in elements, kept whole) or by fleet.distributed_model / distributed_optimizer."""
    if args.group_sharded:
        from oarlock.distributed.sharding import group_sharded_parallel
        model, optimizer, _ = group_sharded_parallel(model, optimizer, level=args.group_sharded,
                                                     segment_size=segment_size)
        return model, optimizer
    return fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)


def recompute_context(args, hcg):
    """PipelineLayer's recompute_ctx for --recompute: with tensor parallelism Paddle's usual form, the mp group
    (its segments then go through recompute_hybrid), else the plain recompute's options."""
    if not args.recompute:
        return None
    if hcg.get_model_parallel_world_size() > 1:
        return {"mp_group": hcg.get_model_parallel_group(), "offload": False, "partition": False}
    return {"preserve_rng_state": True}


def build_pipeline(args, hcg):
    """This rank's stages of the GPT as a PipelineLayer (its weights from --init, its mp slice)."""
    from oarlock.distributed.fleet.meta_parallel import PipelineLayer
    paddle.seed(args.seed)
    model = PipelineLayer(pipeline_descs(args, hcg.get_model_parallel_world_size()), topology=hcg.topology(),
                          loss_fn=GPTLoss(), num_virtual_pipeline_stages=args.vpp if args.vpp > 1 else None,
                          recompute_interval=1 if args.recompute else 0,
                          recompute_ctx=recompute_context(args, hcg))
    if args.init:
        load_pipeline_state(model, paddle.load(args.init), args, hcg.get_model_parallel_rank(),
                            hcg.get_model_parallel_world_size())
    return model


def batch_rows(args, step: int, rows: slice):
    """(tokens, labels) of this rank's rows of step `step`'s global batch, numpy int64."""
    tokens, labels = global_batch(step, args.seed, args.batch, args.seq_len, args.vocab)
    return tokens[rows], labels[rows]


def evaluation_loss(args, model, criterion, rows: slice) -> float:
    """The loss of the trained model on a batch it never saw (the one of step --steps), forward only: by
    PipelineParallel.eval_batch(compute_loss=True) under --pp, else the model's forward; averaged over ranks."""
    if args.pp > 1:
        loss = model.eval_batch(list(map(paddle.to_tensor, batch_rows(args, args.steps, rows))), compute_loss=True)
    else:
        with paddle.no_grad():
            loss = step_loss(args, model, criterion, args.steps, rows)
    loss = loss.detach().clone()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return float(loss)


def step_loss(args, model, criterion, step: int, rows: slice):
    """The mean loss of this rank's rows of step `step`'s global batch (forward only)."""
    tokens, labels = global_batch(step, args.seed, args.batch, args.seq_len, args.vocab)
    labels = paddle.to_tensor(labels[rows])
    logits = model(paddle.to_tensor(tokens[rows]))
    if args.sp:
        labels = paddle.transpose(labels, [1, 0])         # the logits are [s, b, vocab/mp]
    return criterion(logits, labels).mean()


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    hcg = init_fleet(args)
    world, rank = dist.get_world_size(), dist.get_rank()
    if args.save_init:
        if world != 1:
            raise ValueError(f"hybrid_gpt: --save-init writes the full weights from one process, but the job has "
                             f"{world} ranks")
        paddle.seed(args.seed)
        model = GPT(args.vocab, args.width, args.layers, args.heads, args.seq_len, mp=1, sp=False)
        paddle.save(model.state_dict(), args.save_init)
        print(f"wrote the full initial weights ({len(model.state_dict())} tensors) to {args.save_init}")
        return 0
    mp_rank, mp_degree = hcg.get_model_parallel_rank(), hcg.get_model_parallel_world_size()
    share, shares = data_share(args, hcg)
    if args.batch % shares:
        raise ValueError(f"hybrid_gpt: --batch {args.batch} must be divisible by the {shares} data-parallel-like "
                         f"ranks (dp x sharding, or the world with --group-sharded)")

    model = build_pipeline(args, hcg) if uses_pipeline(args) else build_model(args, mp_rank, mp_degree)
    criterion = ParallelCrossEntropy()
    model, optimizer = distribute(args, model, build_optimizer(args, model))

    per_rank = args.batch // shares
    rows = slice(share * per_rank, (share + 1) * per_rank)
    losses, grad_norms = [], []
    for step in range(args.steps):
        if args.pp > 1:    # PipelineParallel: micro-batches through the schedule, optimizer step included
            loss = model.train_batch(list(map(paddle.to_tensor, batch_rows(args, step, rows))), optimizer)
        else:
            loss = step_loss(args, model, criterion, step, rows)
            loss.backward()
            if world == 1:     # one process: the global norm the clip sees (the tests check that it bites)
                grad_norms.append(math.sqrt(sum(float((p.grad * p.grad).sum()) for p in model.parameters()
                                                if p.grad is not None)))
            optimizer.step()
            optimizer.clear_grad()
        reported = loss.detach().clone()
        dist.all_reduce(reported, op=dist.ReduceOp.AVG)        # mp ranks agree; dp-like ranks hold equal shares
        losses.append(float(reported))
        if rank == 0:
            print(f"step {step + 1:3d}  loss {losses[-1]:.6f}", flush=True)
    evaluated = evaluation_loss(args, model, criterion, rows)
    if args.json and rank == 0:
        layout = {"world": world, "dp": args.dp, "mp": args.mp, "sharding": args.sharding, "sp": args.sp,
                  "group_sharded": args.group_sharded, "pp": args.pp, "vpp": args.vpp, "schedule": args.schedule,
                  "micro_batches": args.micro_batches, "recompute": args.recompute, "dict_inputs": args.dict_inputs,
                  "tie_embeddings": args.tie_embeddings}
        with open(args.json, "w") as out:
            json.dump({"losses": losses, "grad_norms": grad_norms or None, "eval_loss": evaluated,
                       "layout": layout}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
