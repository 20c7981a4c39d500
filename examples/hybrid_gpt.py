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
"""

from __future__ import annotations

import argparse
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
    for name in ("dp", "mp", "sharding", "steps", "batch", "seq_len", "vocab", "width", "layers", "heads"):
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
    return parser, args


def init_fleet(args):
    """fleet.init with the asked degrees (group-sharded: every rank data-parallel-like, dp_degree left to fleet)."""
    strategy = fleet.DistributedStrategy()
    if not args.group_sharded:
        strategy.hybrid_configs = {"dp_degree": args.dp, "mp_degree": args.mp, "pp_degree": 1,
                                   "sharding_degree": args.sharding}
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

    model = build_model(args, mp_rank, mp_degree)
    criterion = ParallelCrossEntropy()
    model, optimizer = distribute(args, model, build_optimizer(args, model))

    per_rank = args.batch // shares
    rows = slice(share * per_rank, (share + 1) * per_rank)
    losses, grad_norms = [], []
    for step in range(args.steps):
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
    if args.json and rank == 0:
        layout = {"world": world, "dp": args.dp, "mp": args.mp, "sharding": args.sharding, "sp": args.sp,
                  "group_sharded": args.group_sharded}
        with open(args.json, "w") as out:
            json.dump({"losses": losses, "grad_norms": grad_norms or None, "layout": layout}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
