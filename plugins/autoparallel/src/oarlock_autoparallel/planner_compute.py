"""The planner's one-process compute probe: forward + backward time and memory of one transformer block and of the
model's ends (embedding, final norm, head, cross entropy) at the shapes one rank computes under a layout (its rows
of a micro-batch; its 1/mp of the heads, MLP units and vocabulary), and the AdamW step (with the global-norm clip)
over one block's and the ends' parameters.

The layers are built here from oarlock.nn with the shapes of oarlock train's GPT (fused qkv with biases, rotary
embeddings, flashmask_attention with a causal mask, SiLU MLP, RMSNorm), not imported from it: the planner does not
depend on oarlock-train. A mixture-of-experts block is measured as a dense block whose MLP is top_k times wider
(the same multiply-adds per token); the routing itself is not measured.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock_autoparallel.planner_model import ModelSpec


@dataclass(frozen=True)
class Cost:
    """seconds: forward + backward; saved: bytes the forward keeps for backward; transient: bytes above that
    at the peak of backward; fixed: bytes the first block of a model keeps beyond what each later one adds (the
    kernels' scratch arrays, reused by every block: held once, not per block)."""

    seconds: float
    saved: int
    transient: int
    fixed: int = 0


class _LocalBlock(nn.Layer):
    """One rank's share of a GPT block under mp-way tensor parallelism."""

    def __init__(self, spec: ModelSpec, mp: int):
        super().__init__()
        w = spec.width
        self.heads, self.head_dim = spec.heads // mp, w // spec.heads
        hidden = spec.hidden * (spec.top_k if spec.experts else 1) // mp
        self.attn_norm, self.mlp_norm = nn.RMSNorm(w), nn.RMSNorm(w)
        self.qkv, self.proj = nn.Linear(w, 3 * w // mp), nn.Linear(w // mp, w)
        self.fc, self.out = nn.Linear(w, hidden), nn.Linear(hidden, w)

    def forward(self, x, cos, sin, mask):
        b, t = x.shape[0], x.shape[1]
        qkv = self.qkv(self.attn_norm(x)).reshape([b, t, 3 * self.heads, self.head_dim])
        qk, v = oarlock.split(qkv, [2 * self.heads, self.heads], axis=2)
        q, k = oarlock.split(F.fused_rotary_embedding(qk, cos, sin), 2, axis=2)
        y = F.flashmask_attention(q, k, v, mask, causal=True).reshape([b, t, self.heads * self.head_dim])
        x = x + self.proj(y)
        return x + self.out(F.silu(self.fc(self.mlp_norm(x))))


class _LocalEnds(nn.Layer):
    """One rank's embedding rows, final norm, head columns and cross entropy (1/mp of the vocabulary)."""

    def __init__(self, spec: ModelSpec, mp: int):
        super().__init__()
        self.embed = nn.Embedding(spec.vocab // mp, spec.width)
        self.norm, self.head = nn.RMSNorm(spec.width), nn.Linear(spec.width, spec.vocab // mp, bias_attr=False)

    def forward(self, tokens, targets, body):
        return F.cross_entropy(self.head(self.norm(body(self.embed(tokens)))).reshape([-1, self.head.weight.shape[1]]),
                               targets.reshape([-1]))


def _rope(seq: int, head_dim: int):
    inv = 10000.0 ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv)
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[None, :, None, :]
    sin = np.concatenate([-np.sin(angles), np.sin(angles)], axis=-1)[None, :, None, :]
    return oarlock.to_tensor(cos.astype(np.float32)), oarlock.to_tensor(sin.astype(np.float32))


def _timed(run, reps: int, clear, marks: list | None = None, before=None) -> tuple[float, int, int, int]:
    """(median seconds of `reps` runs after one warm-up, saved bytes, transient bytes, fixed bytes) of run(), which
    returns the loss whose backward it times; clear() drops the gradients, as a training step's clear_grad does.
    `marks`: a list run() appends device.memory_allocated() to after its first layer's forward, when it stacks two
    layers: then saved is what the second one adds (a layer in the middle of a model) and fixed the first one's
    excess over it.

    Memory comes from the device's allocation counters in the warm-up run: the kernels keep arrays from one call
    to the next (flashmask's scratch, the gradients' buffers) and hand them out again, so a later run of the same
    layers allocates less than a model's forward does (measured, 16 x 128 tokens: one block 20 MiB in its first
    run, 5 MiB in the next; the whole GPT's forward keeps 64-79 MiB for 4 blocks). What the second of two stacked
    blocks adds is the same whatever was measured before in the process (17.0 MiB there, cold or after other
    shapes); the first block's excess (`fixed`) is the kernels' scratch, which an earlier, larger shape's scratch
    may already cover (then it reads lower: the probe measures the largest shapes first).

    `before`: called before each timed run (the multi-rank probe's barrier, so that every rank's run overlaps the
    others' instead of drifting apart: a rank that finished its runs early would give its core to the rest)."""
    device = oarlock.device
    seconds, saved, transient, fixed = [], 0, 0, 0
    for i in range(reps + 1):
        clear()
        if marks is not None:
            marks.clear()
        if before is not None:
            before()
        base = device.memory_allocated()
        device.reset_max_memory_allocated()
        t0 = time.perf_counter()
        loss = run()
        held = device.memory_allocated() - base
        loss.backward()
        seconds.append(time.perf_counter() - t0)
        peak = device.max_memory_allocated() - base
        if i == 0:
            saved, transient = held, peak - held
            if marks:
                first = marks[0] - base
                saved, fixed = held - first, max(0, 2 * first - held)
        del loss
    return statistics.median(seconds[1:]), saved, transient, fixed


def _clear(layer, *inputs):
    """A clear() for _timed: the layer's and the inputs' gradients."""
    def clear():
        layer.clear_gradients()
        for x in inputs:
            x.clear_gradient()
    return clear


def measure_block(spec: ModelSpec, rows: int, mp: int, reps: int = 3, before=None) -> Cost:
    """One block's forward + backward on `rows` sequences at mp-way tensor parallelism: two blocks stacked, so
    that the memory is what a block in a model adds (Cost.saved) apart from what the first keeps once
    (Cost.fixed); the time is half the pair's."""
    oarlock.seed(0)
    first, second = _LocalBlock(spec, mp), _LocalBlock(spec, mp)
    cos, sin = _rope(spec.seq_len, spec.width // spec.heads)
    x = oarlock.randn([rows, spec.seq_len, spec.width])
    x.stop_gradient = False
    mask = oarlock.to_tensor(np.full([rows, 1, spec.seq_len, 1], spec.seq_len, dtype=np.int32))
    marks: list = []

    def run():
        h = first(x, cos, sin, mask)
        marks.append(oarlock.device.memory_allocated())
        return second(h, cos, sin, mask).sum()

    def clear():
        _clear(first, x)()
        second.clear_gradients()
    seconds, saved, transient, fixed = _timed(run, reps, clear, marks, before)
    return Cost(seconds / 2, saved, transient, fixed)


def measure_ends(spec: ModelSpec, rows: int, mp: int, reps: int = 3, before=None) -> Cost:
    """The embedding, final norm, head and cross entropy's forward + backward on `rows` sequences."""
    oarlock.seed(0)
    ends = _LocalEnds(spec, mp)
    local_vocab = spec.vocab // mp
    tokens = oarlock.to_tensor(np.random.default_rng(0).integers(0, local_vocab, [rows, spec.seq_len]))
    targets = oarlock.to_tensor(np.random.default_rng(1).integers(0, local_vocab, [rows, spec.seq_len]))
    return Cost(*_timed(lambda: ends(tokens, targets, lambda x: x), reps, _clear(ends), before=before))


def measure_optimizer(spec: ModelSpec, mp: int, reps: int = 3, before=None) -> tuple[float, float]:
    """Seconds of an AdamW step (global-norm clip included) over (one block's, the ends') parameters; `before`:
    called before each timed step (as in _timed)."""
    results = []
    for layer in (_LocalBlock(spec, mp), _LocalEnds(spec, mp)):
        params = layer.parameters()
        opt = oarlock.optimizer.AdamW(learning_rate=1e-3, parameters=params,
                                      grad_clip=nn.ClipGradByGlobalNorm(1.0))
        times = []
        for _ in range(reps + 1):
            sum(p.sum() for p in params).backward()
            if before is not None:
                before()
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
            opt.clear_grad()
        results.append(statistics.median(times[1:]))
    return results[0], results[1]

