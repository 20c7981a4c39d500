"""The verdicts of SDCMonitor's checks, computed from what every rank of the group contributed (one all-gather),
so that every rank reaches the same verdict and raises the same error: no rank is left waiting in a collective.

A step check's packet (int64) is the parameters' fingerprints followed by TRAILER fields: the index of the first
parameter that changed since the last check without a step (-1: none), of the first non-finite gradient, of
the first non-finite parameter, the loss verdict's code and the loss itself (float64 bits). A replay packet is
the replayed gradients' fingerprints followed by the index of the first gradient that differed between this
rank's own replays and the index of the first gradient of the own-batch replay that differed from the training
backward's (-1: none, or no own-batch replay).
"""

from __future__ import annotations

import numpy as np

from oarlock_resilience.sdc_errors import SilentDataCorruptionError
from oarlock_resilience.sdc_fingerprint import odd_ones

TRAILER = 5
_LOSS_KINDS = [None, "nonfinite_loss", "loss_spike"]


def pack_step(fps: np.ndarray, changed: int, grad: int, param: int, loss_kind: str | None, loss: float):
    loss_bits = np.array([np.nan if loss is None else loss], dtype=np.float64).view(np.int64)[0]
    trailer = [changed, grad, param, _LOSS_KINDS.index(loss_kind), loss_bits]
    return np.concatenate([fps, np.array(trailer, dtype=np.int64)])


def _reported(gathered, column: int) -> list:
    """[(position, value)] of the ranks whose trailer field `column` is set (>= 0)."""
    return [(i, int(v)) for i, v in enumerate(gathered[:, column]) if v >= 0]


def step_verdict(gathered: np.ndarray, ranks: list, names: list, step: int):
    """The error the gathered step packets [ranks, params + TRAILER] show, or None. Order: a rank's own
    parameter changed between steps, a non-finite loss (it names the rank where the nan/inf started, before the
    all-reduce spread it to every rank's gradients), non-finite gradients, non-finite parameters, replicas
    that differ, then loss spikes (each rank judges its own loss)."""
    count = len(names)
    trailer = gathered[:, count:]
    losses = trailer[:, 4].copy().view(np.float64)
    checks = ((0, "changed_between_steps"), ("loss", "nonfinite_loss"), (1, "nonfinite_grad"),
              (2, "nonfinite_param"), ("replicas", "replica_mismatch"), ("loss", "loss_spike"))
    for field, kind in checks:
        if field == "replicas":
            error = mismatch_verdict(gathered[:, :count], ranks, names, step, kind)
            if error is not None:
                return error
        elif field == "loss":
            code = _LOSS_KINDS.index(kind)
            hits = [p for p, c in enumerate(trailer[:, 3]) if c == code]
            if hits:
                detail = ", ".join(f"rank {ranks[p]}: loss {losses[p]:.6g}" for p in hits)
                return SilentDataCorruptionError(step, [ranks[p] for p in hits], None, kind, detail)
        else:
            hits = _reported(trailer, field)
            if hits:
                pos, index = hits[0]
                return SilentDataCorruptionError(step, [ranks[p] for p, _ in hits], names[index], kind,
                                                 f"first seen on rank {ranks[pos]}; {len(hits)} rank(s) reported it")
    return None


def mismatch_verdict(fps: np.ndarray, ranks: list, names: list, step: int, kind: str, tie_break=None):
    """The error for fingerprints [ranks, params] that differ between ranks, or None. The ranks named are those
    outside the majority of the first differing parameter; without a strict majority (two ranks) `tie_break`
    (positions -> the positions it convicts, collective) may narrow them down, else all disagreeing ranks are
    named."""
    differing = [j for j in range(fps.shape[1]) if (fps[:, j] != fps[0, j]).any()]
    if not differing:
        return None
    first = differing[0]
    odd, strict = odd_ones(fps[:, first])
    how = "disagree with the majority"
    if not strict:
        convicted = tie_break(odd) if tie_break is not None else []
        if convicted:
            odd, how = convicted, "failed the known-answer matmul test (no majority to vote)"
        else:
            how = "disagree and no majority decides which is wrong"
    detail = f"rank(s) {[ranks[p] for p in odd]} {how}; {len(differing)} of {len(names)} tensors differ " \
             f"({', '.join(names[j] for j in differing[:5])}{', ...' if len(differing) > 5 else ''})"
    return SilentDataCorruptionError(step, [ranks[p] for p in odd], names[first], kind, detail)


def replay_verdict(gathered: np.ndarray, ranks: list, names: list, step: int, tie_break):
    """The error the gathered replay packets [ranks, params + 2] show, or None: a rank whose training backward
    and own-batch replay disagree, or whose shared replays disagree, names itself; otherwise the replayed
    gradients of the shared micro-batch must agree across ranks."""
    count = len(names)
    for field, what in ((1, "the replay of the rank's own micro-batch gave other gradients than its training step"),
                        (0, "two replays of the same micro-batch on one rank gave different gradients")):
        hits = _reported(gathered[:, count:], field)
        if hits:
            return SilentDataCorruptionError(step, [ranks[p] for p, _ in hits], names[hits[0][1]],
                                             "replay_mismatch", what)
    return mismatch_verdict(gathered[:, :count], ranks, names, step, "replay_mismatch", tie_break)
