"""GradScaler and AmpScaler: dynamic loss scaling with Paddle's API (torch's methods work too).

A float16 gradient underflows to zero below 6e-8; multiplying the loss by a large scale lifts the
gradients into range, and they are divided by it again before the optimizer step. When a scaled
gradient overflows (inf or nan), the step is skipped and the scale lowered; after a run of good
steps it is raised again. Paddle's rule (its _update):

- a step with an inf/nan gradient: good count = 0, bad count += 1; when the bad count reaches
  decr_every_n_nan_or_inf: scale *= decr_ratio, bad count = 0;
- a finite step: bad count = 0, good count += 1; when it reaches incr_every_n_steps: scale *= incr_ratio,
  good count = 0.

torch's GradScaler is the case decr_every_n_nan_or_inf=1 (growth_interval = incr_every_n_steps,
growth_factor = incr_ratio, backoff_factor = decr_ratio).

As in Paddle, scale() turns the scaler off (with a warning) when the auto_cast block entered last
computed in bfloat16, whose range is float32's: loss scaling is not needed there. (Paddle also does
that before any auto_cast block was entered; oarlock keeps the scaler on then.)
"""

from __future__ import annotations

import enum
import math
import numbers
import warnings

import numpy as np

import oarlock
from oarlock import Tensor
from oarlock_nn.amp.autocast import LAST, suspended


class OptimizerState(enum.Enum):
    """Where an optimizer is in the current iteration: gradients still scaled, unscaled, or stepped."""

    INIT = 0
    UNSCALED = 1
    STEPPED = 2


def _positive_number(owner, arg, value, test, accepts):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not test(value):
        raise ValueError(f"{owner}: argument '{arg}' must be {accepts}, got {type(value).__name__} {value!r}")
    return value


def _positive_int(owner, arg, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: argument '{arg}' must be a positive int, got {type(value).__name__} {value!r}")
    return int(value)


def _check_bool(owner, arg, value):
    if not isinstance(value, bool):
        raise TypeError(f"{owner}: argument '{arg}' must be a bool, got {type(value).__name__} {value!r}")
    return value


class AmpScaler:
    """Paddle's AmpScaler: scale(loss), minimize(optimizer, scaled_loss) (unscale, step unless a gradient
    is inf/nan, update the scale), unscale_ and the get/set accessors. GradScaler adds step() + update()
    and other defaults; use GradScaler."""

    _owner = "AmpScaler"

    def __init__(self, enable=True, init_loss_scaling=2.0 ** 15, incr_ratio=2.0, decr_ratio=0.5,
                 incr_every_n_steps=1000, decr_every_n_nan_or_inf=1, use_dynamic_loss_scaling=True):
        owner = self._owner
        self._enable = _check_bool(owner, "enable", enable)
        self._use_dynamic_loss_scaling = _check_bool(owner, "use_dynamic_loss_scaling", use_dynamic_loss_scaling)
        self._init_loss_scaling = float(_positive_number(owner, "init_loss_scaling", init_loss_scaling,
                                                         lambda v: 0 < v < math.inf, "a positive finite float"))
        self._incr_ratio = float(_positive_number(owner, "incr_ratio", incr_ratio, lambda v: 1 < v < math.inf,
                                                  "a float > 1"))
        self._decr_ratio = float(_positive_number(owner, "decr_ratio", decr_ratio, lambda v: 0 < v < 1,
                                                  "a float in (0, 1)"))
        self._incr_every_n_steps = _positive_int(owner, "incr_every_n_steps", incr_every_n_steps)
        self._decr_every_n_nan_or_inf = _positive_int(owner, "decr_every_n_nan_or_inf", decr_every_n_nan_or_inf)
        self._incr_count = 0
        self._decr_count = 0
        self._scale = self._scale_tensor(self._init_loss_scaling)
        self._found_inf = oarlock.zeros([1], dtype="bool")
        self._cache_found_inf = None      # the last step's verdict, read by _update
        self._optimizer_states: dict[int, OptimizerState] = {}
        if not self._enable:
            self._use_dynamic_loss_scaling = False
            self._init_loss_scaling = 1.0

    @staticmethod
    def _scale_tensor(value):
        # Paddle keeps the scale as a float32 tensor of shape [1]
        return oarlock.to_tensor(np.array([value], dtype=np.float32))

    # -- scaling ---------------------------------------------------------------------------------------------
    def scale(self, var):
        """var * the loss scale (var itself when the scaler is off), computed in float32; a list or tuple
        of tensors (torch) gives one of scaled tensors."""
        if isinstance(var, (list, tuple)):
            return type(var)(self.scale(v) for v in var)
        if not isinstance(var, Tensor):
            raise TypeError(f"{self._owner}.scale(): argument 'var' must be a Tensor (the loss), got "
                            f"{type(var).__name__}")
        if self._enable and self._use_dynamic_loss_scaling and LAST.dtype == "bfloat16":
            self._enable, self._use_dynamic_loss_scaling, self._init_loss_scaling = False, False, 1.0
            warnings.warn(f"{self._owner}: dynamic loss scaling is not needed for bfloat16 (the last auto_cast "
                          f"block), so the scaler turns itself off (as Paddle's does)", stacklevel=2)
        if not self._enable:
            return var
        with suspended():
            if var.dtype in (oarlock.float16, oarlock.bfloat16):
                var = var.astype("float32")  # a float16 loss times 2**16 would overflow
            return var * self._scale

    def _grads(self, optimizer):
        groups = getattr(optimizer, "param_groups", None)
        if groups is None:
            raise TypeError(f"{self._owner}: expected an oarlock optimizer, got {type(optimizer).__name__}")
        return [p.grad for group in groups for p in group["params"] if p.grad is not None]

    def _unscale(self, optimizer):
        """Divide the optimizer's gradients by the scale in place, noting whether any is inf/nan."""
        if not self._enable:
            return
        state = self._optimizer_states.get(id(optimizer), OptimizerState.INIT)
        if state is OptimizerState.UNSCALED:
            raise RuntimeError(f"{self._owner}.unscale_(): already called on this optimizer since the last "
                               f"update()")
        if state is OptimizerState.STEPPED:
            raise RuntimeError(f"{self._owner}.unscale_(): called after step(); unscale before stepping, and "
                               f"call update() to start the next iteration")
        grads = self._grads(optimizer)
        with oarlock.no_grad(), suspended():
            self._found_inf = oarlock.zeros([1], dtype="bool")
            if grads:
                oarlock.check_finite_and_unscale_(grads, self._scale, self._found_inf)
        self._optimizer_states[id(optimizer)] = OptimizerState.UNSCALED

    def _step(self, optimizer, run):
        """Unscale unless done, then run() unless a gradient is inf/nan; returns run()'s result or None."""
        if self._optimizer_states.get(id(optimizer), OptimizerState.INIT) is OptimizerState.INIT:
            self._unscale(optimizer)
        self._cache_found_inf = bool(self._found_inf.item())  # the one host sync of the iteration
        return None if self._cache_found_inf else run()

    def minimize(self, optimizer, *args, **kwargs):
        """optimizer.minimize(*args, **kwargs) on the unscaled gradients, skipped when any is inf/nan, then
        the scale update. Returns what optimizer.minimize returns (None when skipped)."""
        if not self._enable:
            return optimizer.minimize(*args, **kwargs)
        result = self._step(optimizer, lambda: optimizer.minimize(*args, **kwargs))
        if self._use_dynamic_loss_scaling:
            self._update()
        self._optimizer_states = {}
        return (None, None) if result is None else result

    def _update(self):
        if not self._enable:
            return
        with suspended():  # the scale stays float32 inside an auto_cast block too
            self._apply_verdict()

    def _apply_verdict(self):
        if self._cache_found_inf:
            self._incr_count = 0
            self._decr_count += 1
            if self._decr_count == self._decr_every_n_nan_or_inf:
                self._scale = self._scale * self._decr_ratio
                self._decr_count = 0
        else:
            self._decr_count = 0
            self._incr_count += 1
            if self._incr_count == self._incr_every_n_steps:
                self._scale = self._scale * self._incr_ratio
                self._incr_count = 0

    # -- accessors ----------------------------------------------------------------------------------------------
    def is_enable(self) -> bool:
        return self._enable

    def is_use_dynamic_loss_scaling(self) -> bool:
        return self._use_dynamic_loss_scaling

    def get_loss_scaling(self) -> Tensor:
        """The current scale, a float32 tensor of shape [1]."""
        return self._scale

    def get_init_loss_scaling(self) -> float:
        return self._init_loss_scaling

    def set_init_loss_scaling(self, new_init_loss_scaling):
        """Set the initial scale and restart from it."""
        self._init_loss_scaling = float(_positive_number(
            f"{self._owner}.set_init_loss_scaling()", "new_init_loss_scaling", new_init_loss_scaling,
            lambda v: 0 < v < math.inf, "a positive finite float"))
        self._scale = self._scale_tensor(self._init_loss_scaling)

    def get_incr_ratio(self) -> float:
        return self._incr_ratio

    def set_incr_ratio(self, new_incr_ratio):
        self._incr_ratio = float(_positive_number(f"{self._owner}.set_incr_ratio()", "new_incr_ratio",
                                                  new_incr_ratio, lambda v: 1 < v < math.inf, "a float > 1"))

    def get_decr_ratio(self) -> float:
        return self._decr_ratio

    def set_decr_ratio(self, new_decr_ratio):
        self._decr_ratio = float(_positive_number(f"{self._owner}.set_decr_ratio()", "new_decr_ratio",
                                                  new_decr_ratio, lambda v: 0 < v < 1, "a float in (0, 1)"))

    def get_incr_every_n_steps(self) -> int:
        return self._incr_every_n_steps

    def set_incr_every_n_steps(self, new_incr_every_n_steps):
        self._incr_every_n_steps = _positive_int(f"{self._owner}.set_incr_every_n_steps()",
                                                 "new_incr_every_n_steps", new_incr_every_n_steps)

    def get_decr_every_n_nan_or_inf(self) -> int:
        return self._decr_every_n_nan_or_inf

    def set_decr_every_n_nan_or_inf(self, new_decr_every_n_nan_or_inf):
        self._decr_every_n_nan_or_inf = _positive_int(f"{self._owner}.set_decr_every_n_nan_or_inf()",
                                                      "new_decr_every_n_nan_or_inf", new_decr_every_n_nan_or_inf)

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Paddle's keys (scale as a float32 array of shape [1]); {} when the scaler is off."""
        if not self._enable:
            return {}
        return {"scale": self._scale.numpy(), "incr_ratio": self._incr_ratio, "decr_ratio": self._decr_ratio,
                "incr_every_n_steps": self._incr_every_n_steps,
                "decr_every_n_nan_or_inf": self._decr_every_n_nan_or_inf, "incr_count": self._incr_count,
                "decr_count": self._decr_count, "use_dynamic_loss_scaling": self._use_dynamic_loss_scaling}

    # torch's state_dict keys -> Paddle's
    _TORCH_KEYS = {"growth_factor": "incr_ratio", "backoff_factor": "decr_ratio",
                   "growth_interval": "incr_every_n_steps", "_growth_tracker": "incr_count"}

    def load_state_dict(self, state_dict):
        """Load what state_dict() returned (torch's GradScaler state is accepted too)."""
        if not self._enable:
            return
        if not isinstance(state_dict, dict):
            raise TypeError(f"{self._owner}.load_state_dict(): argument 'state_dict' must be a dict, got "
                            f"{type(state_dict).__name__}")
        if not state_dict:
            raise RuntimeError(f"{self._owner}.load_state_dict(): the state dict is empty, possibly because it "
                               f"was saved from a disabled scaler")
        state = {self._TORCH_KEYS.get(k, k): v for k, v in state_dict.items()}
        if "scale" not in state:
            raise KeyError(f"{self._owner}.load_state_dict(): no 'scale' entry (keys: {sorted(state_dict)})")
        scale = state["scale"]
        scale = scale.numpy() if isinstance(scale, Tensor) else scale
        self._init_loss_scaling = float(np.asarray(scale).reshape(-1)[0])
        self._scale = self._scale_tensor(self._init_loss_scaling)
        for key in ("incr_ratio", "decr_ratio"):
            if key in state:
                setattr(self, f"_{key}", float(state[key]))
        for key in ("incr_every_n_steps", "decr_every_n_nan_or_inf", "incr_count", "decr_count"):
            if key in state:
                setattr(self, f"_{key}", int(state[key]))
        if "use_dynamic_loss_scaling" in state:
            self._use_dynamic_loss_scaling = bool(state["use_dynamic_loss_scaling"])

    set_state_dict = load_state_dict


class GradScaler(AmpScaler):
    """Dynamic loss scaling for mixed-precision training (Paddle's GradScaler, torch's usage works too).

        scaler = oarlock.amp.GradScaler(init_loss_scaling=1024)
        with oarlock.amp.auto_cast():
            loss = model(x).mean()
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.step(optimizer)       # or scaler.minimize(optimizer, scaled), which also updates
        scaler.update()
        optimizer.clear_grad()

    step() unscales the gradients (unless unscale_(optimizer) was called, e.g. to clip them) and skips
    the optimizer step when any is inf or nan; update() then lowers or raises the scale (see the module
    notes). torch's names: get_scale(), is_enabled(), update(new_scale), get_growth_factor()...
    """

    _owner = "GradScaler"

    def __init__(self, enable=True, init_loss_scaling=2.0 ** 16, incr_ratio=2.0, decr_ratio=0.5,
                 incr_every_n_steps=2000, decr_every_n_nan_or_inf=1, use_dynamic_loss_scaling=True):
        super().__init__(enable, init_loss_scaling, incr_ratio, decr_ratio, incr_every_n_steps,
                         decr_every_n_nan_or_inf, use_dynamic_loss_scaling)

    def unscale_(self, optimizer):
        """Divide the optimizer's gradients by the scale now (to clip or inspect them before step())."""
        return self._unscale(optimizer)

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) on the unscaled gradients, skipped when any is inf or nan.
        Returns what optimizer.step returns (None when skipped)."""
        if not self._enable:
            return optimizer.step(*args, **kwargs)
        if self._optimizer_states.get(id(optimizer)) is OptimizerState.STEPPED:
            raise RuntimeError("GradScaler.step(): already called for this optimizer since the last update()")
        result = self._step(optimizer, lambda: optimizer.step(*args, **kwargs))
        self._optimizer_states[id(optimizer)] = OptimizerState.STEPPED
        if not self._use_dynamic_loss_scaling:  # no update() will start the next iteration
            self._optimizer_states = {}
        return result

    def update(self, new_scale=None):
        """Lower or raise the scale from the last step's verdict; torch's new_scale (a float or a
        1-element tensor) sets it instead."""
        if not self._enable:
            return
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                new_scale = new_scale.item() if new_scale.size == 1 else new_scale
            _positive_number("GradScaler.update()", "new_scale", new_scale, lambda v: 0 < v < math.inf,
                             "a positive finite float or a 1-element Tensor")
            self._scale = self._scale_tensor(float(new_scale))
        elif self._use_dynamic_loss_scaling:
            self._update()
        self._optimizer_states = {}

    # -- torch's names -------------------------------------------------------------------------------------------
    def get_scale(self) -> float:
        """torch: the current scale as a float (1.0 when the scaler is off)."""
        return float(self._scale.item()) if self._enable else 1.0

    def is_enabled(self) -> bool:
        return self._enable

    def get_growth_factor(self) -> float:
        return self._incr_ratio

    def set_growth_factor(self, new_factor):
        self.set_incr_ratio(new_factor)

    def get_backoff_factor(self) -> float:
        return self._decr_ratio

    def set_backoff_factor(self, new_factor):
        self.set_decr_ratio(new_factor)

    def get_growth_interval(self) -> int:
        return self._incr_every_n_steps

    def set_growth_interval(self, new_interval):
        self.set_incr_every_n_steps(new_interval)
