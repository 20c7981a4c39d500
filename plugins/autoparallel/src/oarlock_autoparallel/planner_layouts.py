"""The parallel layouts the planner considers: every (dp, mp, pp, sharding, ep) whose product is the rank count and
that `oarlock train` can run for the model (its rules, checked here without importing it):

* mp (tensor parallel) divides the heads, the vocabulary and the MLP width;
* pp (pipeline) divides the layers (equal stages) and combines with dp only; each data rank's rows are cut into
  2 x pp micro-batches when they divide, else one row each (oarlock train's default), under the 1F1B schedule;
* sharding (stage 1) and dp share each batch: batch % (dp x sharding x ep) == 0;
* ep (expert parallel) only for a mixture-of-experts model, dividing its experts, and with dp only (the MoE GPT
  of oarlock train takes no mp, sharding or pp).

Left out: sequence parallel (--sp), interleaved pipelines (--vpp) and the other schedules.
"""

from __future__ import annotations

from dataclasses import dataclass

from oarlock_autoparallel.planner_model import ModelSpec


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    mp: int = 1
    pp: int = 1
    sharding: int = 1
    ep: int = 1
    micro_batches: int = 1

    @property
    def ranks(self) -> int:
        return self.dp * self.mp * self.pp * self.sharding * self.ep

    @property
    def data_ranks(self) -> int:
        return self.dp * self.sharding * self.ep

    def name(self) -> str:
        parts = [f"{key}{value}" for key, value in (("dp", self.dp), ("mp", self.mp), ("pp", self.pp),
                                                     ("sh", self.sharding), ("ep", self.ep)) if value > 1]
        return "x".join(parts) or "single"

    def train_flags(self) -> list[str]:
        """The `oarlock train` options that run this layout."""
        flags = ["--nproc", str(self.ranks), "--dp", str(self.dp)]
        for flag, value in (("--mp", self.mp), ("--pp", self.pp), ("--sharding", self.sharding), ("--ep", self.ep)):
            if value > 1:
                flags += [flag, str(value)]
        return flags


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_problems(spec: ModelSpec, layout: Layout) -> list[str]:
    """Why oarlock train cannot run `spec` under `layout` (empty when it can)."""
    problems = []
    mp, pp, sh, ep = layout.mp, layout.pp, layout.sharding, layout.ep
    for what, value in (("heads", spec.heads), ("vocab", spec.vocab), ("MLP width", spec.hidden)):
        if value % mp:
            problems.append(f"mp {mp} does not divide the {what} ({value})")
    if spec.layers % pp:
        problems.append(f"pp {pp} does not divide the layers ({spec.layers})")
    if pp > 1 and (mp > 1 or sh > 1):
        problems.append("pp combines with dp only")
    if spec.batch % layout.data_ranks:
        problems.append(f"the batch ({spec.batch}) is not a multiple of the {layout.data_ranks} data ranks")
    if ep > 1 and not spec.experts:
        problems.append("ep needs a mixture-of-experts model")
    if spec.experts and (spec.experts % ep or mp > 1 or sh > 1 or pp > 1):
        problems.append(f"the MoE GPT takes dp and an ep dividing its {spec.experts} experts only")
    return problems


def micro_batches_of(spec: ModelSpec, dp: int, pp: int) -> int:
    """oarlock train's default micro-batch count for pp stages over dp data ranks."""
    if pp == 1:
        return 1
    rows = spec.batch // dp
    return 2 * pp if rows % (2 * pp) == 0 else rows


def enumerate_layouts(spec: ModelSpec, ranks: int) -> list[Layout]:
    """Every layout of `ranks` ranks that oarlock train can run for `spec`, in a fixed order."""
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"plan(): argument ranks: expected an integer >= 1, got {ranks!r}")
    found = []
    for mp in _divisors(ranks):
        for pp in _divisors(ranks // mp):
            for sh in _divisors(ranks // (mp * pp)):
                for ep in _divisors(ranks // (mp * pp * sh)):
                    dp = ranks // (mp * pp * sh * ep)
                    layout = Layout(dp, mp, pp, sh, ep)
                    if layout_problems(spec, layout):
                        continue
                    found.append(Layout(dp, mp, pp, sh, ep, micro_batches_of(spec, dp, pp)))
    return found
