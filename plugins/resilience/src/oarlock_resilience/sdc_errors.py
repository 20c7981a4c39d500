"""SilentDataCorruptionError: what SDCMonitor raises, on every rank of its group alike, when a check fails."""

from __future__ import annotations

# what each `kind` means (the error's message spells it out)
KINDS = {
    "changed_between_steps": "the rank's own parameter changed between two optimizer steps (memory corruption)",
    "replica_mismatch": "data-parallel replicas that must be bit-identical differ after the optimizer step",
    "replay_mismatch": "a replayed forward/backward of the same micro-batch gave different gradients",
    "nonfinite_grad": "a gradient holds inf or nan",
    "nonfinite_param": "a parameter holds inf or nan after the optimizer step",
    "nonfinite_loss": "the recorded loss is inf or nan",
    "loss_spike": "the recorded loss jumped beyond median + k * MAD of the recent losses",
    "repeated": "a rank was found corrupt more often than max_strikes allows; rollback no longer excuses it",
}


class SilentDataCorruptionError(RuntimeError):
    """A failed SDC check. step: the optimizer step (1-based count of completed steps) at whose check it was
    found; ranks: the global ranks that disagree with the majority (or that reported the fault themselves);
    parameter: the parameter's structured name (None for a loss check); kind: one of KINDS; detail: the
    evidence in words."""

    def __init__(self, step: int, ranks: list, parameter: str | None, kind: str, detail: str = ""):
        self.step, self.ranks, self.parameter, self.kind, self.detail = step, list(ranks), parameter, kind, detail
        where = f" in parameter {parameter!r}" if parameter is not None else ""
        text = f"SDCMonitor: silent data corruption ({kind}: {KINDS.get(kind, kind)}) at step {step} on " \
               f"rank(s) {self.ranks}{where}"
        super().__init__(text + (f": {detail}" if detail else ""))

    def __reduce__(self):   # picklable with its fields (it may travel between processes)
        return type(self), (self.step, self.ranks, self.parameter, self.kind, self.detail)
