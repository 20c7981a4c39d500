"""Learning-rate schedulers (oarlock.optimizer.lr), with Paddle's signatures and float sequences.

A scheduler is a host-side counter: constructing it takes step 0, each `step()` advances `last_epoch`
and recomputes `last_lr` (read with `scheduler()` or `get_lr()` through the optimizer). Pass one as an
optimizer's `learning_rate`; as in Paddle, the optimizer never steps it, the training loop does.
`step(epoch)` jumps to an epoch, using the closed form where the schedule is defined recursively.
"""

from __future__ import annotations

import math
import numbers
import warnings


def _check(owner, arg, value, ok, accepts, error=ValueError):
    if not ok:
        raise error(f"{owner}: argument '{arg}' must be {accepts}, got {type(value).__name__} {value!r}")


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive_int(owner, arg, value):
    _check(owner, arg, value, isinstance(value, numbers.Integral) and not isinstance(value, bool), "an int",
           TypeError)
    _check(owner, arg, value, value > 0, "a positive int")


def _rate(owner, arg, value):
    _check(owner, arg, value, _real(value), "a float", TypeError)
    _check(owner, arg, value, value >= 0, "a non-negative float")


class LRScheduler:
    """The base class: subclasses define get_lr() from self.base_lr and self.last_epoch.

    Attributes: base_lr (the initial rate), last_epoch (the number of step() calls; -1 before the first,
    which __init__ makes), last_lr (the current rate, also `scheduler()`). state_dict() saves the names in
    self.keys (state_keys()), set_state_dict() restores them.
    """

    def __init__(self, learning_rate=0.1, last_epoch=-1, verbose=False):
        _rate(type(self).__name__, "learning_rate", learning_rate)
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = last_epoch
        self.verbose = verbose
        self.step()

    def __call__(self) -> float:
        return self.last_lr

    def step(self, epoch=None):
        """Advance one epoch (or jump to `epoch`) and recompute last_lr."""
        if epoch is None:
            self.last_epoch += 1
            self.last_lr = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            self.last_lr = closed() if closed is not None else self.get_lr()
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to {self.last_lr}.")

    def get_lr(self) -> float:
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def get_last_lr(self) -> list:
        """torch's spelling: the current rate, in a list (one per parameter group)."""
        return [self.last_lr]

    def state_keys(self):
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> dict:
        self.state_keys()
        return {key: self.__dict__[key] for key in self.keys if key in self.__dict__}

    def set_state_dict(self, state_dict):
        self.state_keys()
        missing = [key for key in self.keys if key not in state_dict]
        if missing:
            raise KeyError(f"{type(self).__name__}.set_state_dict(): the state has no {missing}; "
                           f"it has {sorted(state_dict)}")
        for key in self.keys:
            self.__dict__[key] = state_dict[key]
        extra = sorted(set(state_dict) - set(self.keys) - set(self._nested_keys()))
        if extra:
            warnings.warn(f"{type(self).__name__}.set_state_dict(): ignored unused keys {extra}", stacklevel=2)

    def _nested_keys(self):
        return ()

    def set_dict(self, state_dict):
        self.set_state_dict(state_dict)

    load_state_dict = set_dict


class NoamDecay(LRScheduler):
    """lr = learning_rate * d_model^-0.5 * min(epoch^-0.5, epoch * warmup_steps^-1.5) (epoch 0: the second)."""

    def __init__(self, d_model, warmup_steps, learning_rate=1.0, last_epoch=-1, verbose=False):
        _check("NoamDecay", "d_model", d_model, _real(d_model) and d_model > 0, "a positive number")
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        a = 1 if self.last_epoch == 0 else self.last_epoch ** -0.5
        b = self.warmup_steps ** -1.5 * self.last_epoch
        return self.base_lr * self.d_model ** -0.5 * min(a, b)


class PiecewiseDecay(LRScheduler):
    """values[i] while epoch < boundaries[i]; values[-1] after the last boundary."""

    def __init__(self, boundaries, values, last_epoch=-1, verbose=False):
        _check("PiecewiseDecay", "boundaries", boundaries, len(boundaries) > 0, "a non-empty list of ints")
        _check("PiecewiseDecay", "values", values, len(values) == len(boundaries) + 1,
               f"a list of len(boundaries) + 1 = {len(boundaries) + 1} rates")
        self.boundaries, self.values = list(boundaries), list(values)
        super().__init__(values[0], last_epoch, verbose)

    def get_lr(self):
        for boundary, value in zip(self.boundaries, self.values):
            if self.last_epoch < boundary:
                return value
        return self.values[-1]


class NaturalExpDecay(LRScheduler):
    """lr = learning_rate * exp(-gamma * epoch)."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        _check("NaturalExpDecay", "gamma", gamma, _real(gamma) and gamma > 0, "a positive float")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * math.exp(-1 * self.gamma * self.last_epoch)


class InverseTimeDecay(LRScheduler):
    """lr = learning_rate / (1 + gamma * epoch)."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr / (1 + self.gamma * self.last_epoch)


class PolynomialDecay(LRScheduler):
    """(learning_rate - end_lr) * (1 - epoch / decay_steps)^power + end_lr; epoch is capped at decay_steps,
    or with cycle=True decay_steps grows to the next multiple of itself past epoch."""

    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False, last_epoch=-1,
                 verbose=False):
        _positive_int("PolynomialDecay", "decay_steps", decay_steps)
        _check("PolynomialDecay", "power", power, _real(power) and power > 0, "a positive float")
        self.decay_steps, self.end_lr, self.power, self.cycle = decay_steps, end_lr, power, cycle
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        epoch, steps = self.last_epoch, self.decay_steps
        if self.cycle:
            steps = self.decay_steps * (1 if epoch == 0 else math.ceil(epoch / self.decay_steps))
        else:
            epoch = min(epoch, steps)
        return (self.base_lr - self.end_lr) * (1 - epoch / steps) ** self.power + self.end_lr


class LinearWarmup(LRScheduler):
    """start_lr -> end_lr linearly over warmup_steps, then `learning_rate`: a float, or a scheduler stepped
    to (epoch - warmup_steps)."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False):
        _check("LinearWarmup", "learning_rate", learning_rate,
               isinstance(learning_rate, LRScheduler) or _real(learning_rate), "a float or an LRScheduler",
               TypeError)
        _positive_int("LinearWarmup", "warmup_steps", warmup_steps)
        _check("LinearWarmup", "end_lr", end_lr, end_lr > start_lr, f"greater than start_lr ({start_lr})")
        self.learning_rate, self.warmup_steps = learning_rate, warmup_steps
        self.start_lr, self.end_lr = start_lr, end_lr
        super().__init__(start_lr, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * self.last_epoch / self.warmup_steps + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate

    def state_dict(self):
        state = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            state["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return state

    def set_state_dict(self, state_dict):
        super().set_state_dict(state_dict)
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.set_state_dict(state_dict["LinearWarmup_LR"])

    def _nested_keys(self):
        return ("LinearWarmup_LR",)


class ExponentialDecay(LRScheduler):
    """lr = learning_rate * gamma^epoch."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        _check("ExponentialDecay", "gamma", gamma, _real(gamma) and 0 < gamma < 1, "a float in (0, 1)")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** self.last_epoch


class MultiStepDecay(LRScheduler):
    """lr = learning_rate * gamma^(number of milestones <= epoch)."""

    def __init__(self, learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        _check("MultiStepDecay", "milestones", milestones, isinstance(milestones, (list, tuple)),
               "a list or tuple of ints", TypeError)
        _check("MultiStepDecay", "milestones", milestones,
               all(a < b for a, b in zip(milestones, milestones[1:])), "increasing")
        _check("MultiStepDecay", "gamma", gamma, _real(gamma) and gamma < 1, "a float below 1")
        self.milestones, self.gamma = list(milestones), gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        passed = next((i for i, m in enumerate(self.milestones) if self.last_epoch < m), len(self.milestones))
        return self.base_lr * self.gamma ** passed


class StepDecay(LRScheduler):
    """lr = learning_rate * gamma^(epoch // step_size)."""

    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        _positive_int("StepDecay", "step_size", step_size)
        _check("StepDecay", "gamma", gamma, _real(gamma) and gamma < 1, "a float below 1")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class LambdaDecay(LRScheduler):
    """lr = learning_rate * lr_lambda(epoch)."""

    def __init__(self, learning_rate, lr_lambda, last_epoch=-1, verbose=False):
        _check("LambdaDecay", "lr_lambda", lr_lambda, callable(lr_lambda), "a function of the epoch", TypeError)
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.lr_lambda(self.last_epoch)


class MultiplicativeDecay(LRScheduler):
    """lr = learning_rate * prod(lr_lambda(e) for e in 1..epoch)."""

    def __init__(self, learning_rate, lr_lambda, last_epoch=-1, verbose=False):
        _check("MultiplicativeDecay", "lr_lambda", lr_lambda, callable(lr_lambda), "a function of the epoch",
               TypeError)
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        lr = self.base_lr
        for epoch in range(1, self.last_epoch + 1):
            lr = lr * self.lr_lambda(epoch)
        return lr


class CosineAnnealingDecay(LRScheduler):
    """Cosine from learning_rate down to eta_min over T_max epochs (then back up: a period of 2 T_max).

    step() follows the recursive form Paddle and torch use (so a rate changed from outside carries on),
    step(epoch) the closed form eta_min + (lr - eta_min)(1 + cos(pi epoch / T_max)) / 2.
    """

    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):
        _positive_int("CosineAnnealingDecay", "T_max", T_max)
        _check("CosineAnnealingDecay", "eta_min", eta_min, _real(eta_min), "a float", TypeError)
        self.T_max, self.eta_min = T_max, float(eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        epoch, period = self.last_epoch, self.T_max
        if epoch == 0:
            return self.base_lr
        if (epoch - 1 - period) % (2 * period) == 0:  # at the trough the ratio below would divide by zero
            return self.last_lr + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / period)) / 2
        ratio = (1 + math.cos(math.pi * epoch / period)) / (1 + math.cos(math.pi * (epoch - 1) / period))
        return ratio * (self.last_lr - self.eta_min) + self.eta_min

    def _get_closed_form_lr(self):
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class LinearLR(LRScheduler):
    """The rate's factor goes linearly from start_factor to end_factor over total_steps, then stays."""

    def __init__(self, learning_rate, total_steps, start_factor=1.0 / 3, end_factor=1.0, last_epoch=-1,
                 verbose=False):
        _check("LinearLR", "start_factor", start_factor, 0 < start_factor <= 1, "in (0, 1]")
        _check("LinearLR", "end_factor", end_factor, 0 <= end_factor <= 1, "in [0, 1]")
        _positive_int("LinearLR", "total_steps", total_steps)
        self.start_factor, self.end_factor, self.total_steps = start_factor, end_factor, total_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch == 0:
            return self.base_lr * self.start_factor
        if self.last_epoch > self.total_steps:
            return self.last_lr
        delta = self.end_factor - self.start_factor
        return self.last_lr * (1.0 + delta / (self.total_steps * self.start_factor + (self.last_epoch - 1) * delta))


class OneCycleLR(LRScheduler):
    """The one-cycle policy: from max_learning_rate / divide_factor up to max_learning_rate over the first
    phase_pct of total_steps, then down to end_learning_rate (three_phase: down to the initial rate first,
    over as many steps, then to end_learning_rate), each phase annealed by 'cos' or 'linear'."""

    def __init__(self, max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001, phase_pct=0.3,
                 anneal_strategy="cos", three_phase=False, last_epoch=-1, verbose=False):
        owner = "OneCycleLR"
        _rate(owner, "max_learning_rate", max_learning_rate)
        _rate(owner, "end_learning_rate", end_learning_rate)
        _positive_int(owner, "total_steps", total_steps)
        _check(owner, "phase_pct", phase_pct, isinstance(phase_pct, float), "a float", TypeError)
        _check(owner, "phase_pct", phase_pct, 0 <= phase_pct < 0.5 if three_phase else 0 <= phase_pct <= 1,
               "in [0, 0.5) with three_phase=True" if three_phase else "in [0, 1]")
        _check(owner, "divide_factor", divide_factor, _real(divide_factor), "a float", TypeError)
        _check(owner, "anneal_strategy", anneal_strategy, anneal_strategy in ("cos", "linear"), "'cos' or 'linear'")
        self.total_steps = total_steps
        initial = max_learning_rate / float(divide_factor)
        up = phase_pct * total_steps - 1
        last = total_steps - 1
        if three_phase:
            ends = [up, 2 * phase_pct * total_steps - 2, last]
            rates = [initial, max_learning_rate, initial, float(end_learning_rate)]
        else:
            ends = [up, last]
            rates = [initial, max_learning_rate, float(end_learning_rate)]
        starts = [0, *ends[:-1]]
        # (start step, end step, length, start rate, end rate) per phase; the last phase also covers the final step
        self._phases = [(s, e, e - s, rates[i], rates[i + 1]) for i, (s, e) in enumerate(zip(starts, ends))]
        self._anneal = self._cos if anneal_strategy == "cos" else self._linear
        super().__init__(initial, last_epoch, verbose)

    @staticmethod
    def _cos(start, end, pct):
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear(start, end, pct):
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, beyond total_steps={self.total_steps}")
        for i, (start, end, length, lr_start, lr_end) in enumerate(self._phases):
            if step <= end or i == len(self._phases) - 1:
                return self._anneal(lr_start, lr_end, (step - start) / length)


class ReduceOnPlateau(LRScheduler):
    """Multiply the rate by `factor` once the metric passed to step(metrics) has not improved (by
    `threshold`, relative or absolute) for more than `patience` epochs; then wait `cooldown` epochs."""

    def __init__(self, learning_rate, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, epsilon=1e-8, verbose=False):
        owner = "ReduceOnPlateau"
        _rate(owner, "learning_rate", learning_rate)
        _check(owner, "mode", mode, str(mode).lower() in ("min", "max"), "'min' or 'max'")
        _check(owner, "factor", factor, _real(factor) and factor < 1, "a float below 1")
        _check(owner, "threshold_mode", threshold_mode, str(threshold_mode).lower() in ("rel", "abs"),
               "'rel' or 'abs'")
        self.mode, self.threshold_mode = mode.lower(), threshold_mode.lower()
        self.factor, self.patience, self.threshold = factor, patience, threshold
        self.cooldown, self.min_lr, self.epsilon = cooldown, min_lr, epsilon
        self.cooldown_counter, self.best, self.num_bad_epochs = 0, None, 0
        self.base_lr = self.last_lr = float(learning_rate)
        self.last_epoch, self.verbose = 0, verbose

    def state_keys(self):
        self.keys = ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]

    def step(self, metrics, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if hasattr(metrics, "size") and hasattr(metrics, "item"):
            _check("ReduceOnPlateau.step()", "metrics", metrics, metrics.size == 1, "a number or a 1-element tensor")
            metrics = metrics.item()
        _check("ReduceOnPlateau.step()", "metrics", metrics, _real(metrics), "a number or a 1-element tensor",
               TypeError)
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            return
        if self.best is None or self._is_better(metrics, self.best):
            self.best, self.num_bad_epochs = metrics, 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
            new_lr = max(self.last_lr * self.factor, self.min_lr)
            if self.last_lr - new_lr > self.epsilon:
                self.last_lr = new_lr
                if self.verbose:
                    print(f"Epoch {self.last_epoch}: ReduceOnPlateau set learning rate to {self.last_lr}.")

    def _is_better(self, current, best):
        margin = best * self.threshold if self.threshold_mode == "rel" else self.threshold
        return current < best - margin if self.mode == "min" else current > best + margin


SCHEDULERS = (LRScheduler, NoamDecay, PiecewiseDecay, NaturalExpDecay, InverseTimeDecay, PolynomialDecay,
              LinearWarmup, ExponentialDecay, MultiStepDecay, StepDecay, LambdaDecay, MultiplicativeDecay,
              CosineAnnealingDecay, LinearLR, OneCycleLR, ReduceOnPlateau)
