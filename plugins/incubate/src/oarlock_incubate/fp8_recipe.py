"""FP8 training recipes with TransformerEngine's names and defaults (Paddle has no FP8 autocast of its own):

- DelayedScaling: one scale per tensor (input, weight, output gradient) from an amax history of the last
  `amax_history_len` steps (`amax_compute_algo` "max" of the history or "most_recent"); scale =
  fmt_max / amax / 2^margin, the previous scale kept while the amax is 0 or not finite; the first step uses 1.
- Float8CurrentScaling: one scale per tensor from the tensor's own amax at the time it is cast.
- Float8BlockScaling: DeepSeek-V3's recipe: 1 x 128 blocks of inputs and gradients, 128 x 128 tiles of weights,
  power-of-two scales, e4m3 everywhere.

`fp8_format` is "HYBRID" (e4m3 forward, e5m2 gradients: TE's default for the per-tensor recipes) or "E4M3".
A recipe is a frozen description; the per-layer state (the amax histories) lives in fp8_autocast.Fp8State."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oarlock_incubate import fp8_numerics as fp8

RECIPES = ("DelayedScaling", "Float8CurrentScaling", "Float8BlockScaling")
FORMATS = {"HYBRID": ("e4m3", "e5m2"), "E4M3": ("e4m3", "e4m3")}   # (forward tensors, gradients)
AMAX_ALGOS = ("max", "most_recent")


def _check_format(recipe: str, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"{recipe}(): argument 'fp8_format' = {fmt!r}; accepted: {', '.join(map(repr, FORMATS))}")


class _Recipe:
    per_tensor = True

    @property
    def forward_format(self) -> str:
        return FORMATS[self.fp8_format][0]

    @property
    def backward_format(self) -> str:
        return FORMATS[self.fp8_format][1]


@dataclass(frozen=True)
class DelayedScaling(_Recipe):
    margin: int = 0
    fp8_format: str = "HYBRID"
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"

    def __post_init__(self):
        _check_format("DelayedScaling", self.fp8_format)
        if self.amax_compute_algo not in AMAX_ALGOS:
            raise ValueError(f"DelayedScaling(): argument 'amax_compute_algo' = {self.amax_compute_algo!r}; "
                             f"accepted: {', '.join(map(repr, AMAX_ALGOS))}")
        if not isinstance(self.amax_history_len, int) or self.amax_history_len < 1:
            raise ValueError(f"DelayedScaling(): argument 'amax_history_len' = {self.amax_history_len!r}; "
                             "accepted: an int >= 1")

    def next_scale(self, history: np.ndarray, previous: np.float32, fmt: str) -> np.float32:
        """TE's update: the scale for the next cast from the amax history (newest last)."""
        amax = history.max() if self.amax_compute_algo == "max" else history[-1]
        if not np.isfinite(amax) or amax <= 0:
            return previous
        return np.float32(fp8.FORMAT_MAX[fmt] / np.float32(amax) / np.float32(2.0 ** self.margin))


@dataclass(frozen=True)
class Float8CurrentScaling(_Recipe):
    fp8_format: str = "HYBRID"
    power_2_scale: bool = False
    amax_epsilon: float = 0.0

    def __post_init__(self):
        _check_format("Float8CurrentScaling", self.fp8_format)


@dataclass(frozen=True)
class Float8BlockScaling(_Recipe):
    fp8_format: str = "E4M3"
    power_2_scale: bool = True
    per_tensor = False

    def __post_init__(self):
        _check_format("Float8BlockScaling", self.fp8_format)


BY_NAME = {"delayed": DelayedScaling, "current": Float8CurrentScaling, "blockwise": Float8BlockScaling}


def recipe_named(name: str):
    """The default recipe of a short name (`oarlock train --fp8-recipe`): delayed, current or blockwise."""
    if name not in BY_NAME:
        raise ValueError(f"fp8 recipe {name!r}; accepted: {', '.join(map(repr, BY_NAME))}")
    return BY_NAME[name]()
