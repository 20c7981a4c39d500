"""The Optimizer base class: parameters and parameter groups, the learning rate, per-parameter state,
gradient clipping, clear_grad and state_dict. Subclasses only say which state a parameter needs and
how one parameter steps (one fused update op of oarlock_ops.optimizer_update).

Arguments follow Paddle (learning_rate, parameters, weight_decay, grad_clip, then each optimizer's own);
torch's names (lr, params, betas, eps, ...) are accepted as aliases, and a torch-style call whose first
positional argument is the parameter list works too.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
import warnings

import oarlock
from oarlock import Tensor
from oarlock.autograd import mark_zero_grads, zero_grads
from oarlock.plugin_api import array_of, rebind
from oarlock_nn.amp.autocast import suspended
from oarlock_nn.optim import sharded_state
from oarlock_nn.optim.clip import ClipGradBase
from oarlock_nn.optim.lr import LRScheduler

# What each hyperparameter (as an argument or a parameter-group key) accepts: (test, description).
_REAL = (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool))
CHECKS = {
    "learning_rate": (lambda v: _REAL(v) and v >= 0, "a non-negative float"),
    "lr": (lambda v: _REAL(v) and v >= 0, "a non-negative float"),
    "weight_decay": (lambda v: v is None or (_REAL(v) and v >= 0), "a non-negative float or None"),
    "beta1": (lambda v: _REAL(v) and 0 <= v < 1, "a float in [0, 1)"),
    "beta2": (lambda v: _REAL(v) and 0 <= v < 1, "a float in [0, 1)"),
    "epsilon": (lambda v: _REAL(v) and v >= 0, "a non-negative float"),
    "momentum": (lambda v: _REAL(v) and v >= 0, "a non-negative float"),
    "rho": (lambda v: _REAL(v) and 0 <= v <= 1, "a float in [0, 1]"),
    "rescale_grad": (_REAL, "a float"),
    "initial_accumulator_value": (lambda v: _REAL(v) and v >= 0, "a non-negative float"),
    "lamb_weight_decay": (lambda v: _REAL(v) and v >= 0, "a non-negative float"),
    "use_nesterov": (lambda v: isinstance(v, bool), "a bool"),
    "amsgrad": (lambda v: isinstance(v, bool), "a bool"),
    "centered": (lambda v: isinstance(v, bool), "a bool"),
    "always_adapt": (lambda v: isinstance(v, bool), "a bool"),
}
# a hint for torch arguments that have no Paddle counterpart on this optimizer
_HINTS = {"momentum": "; for SGD with momentum use oarlock.optimizer.Momentum",
          "nesterov": "; for Nesterov momentum use oarlock.optimizer.Momentum(use_nesterov=True)",
          "foreach": "; every oarlock optimizer already runs one fused op per parameter",
          "fused": "; every oarlock optimizer already runs one fused op per parameter"}


def _check(owner, arg, value):
    test, accepts = CHECKS[arg]
    if not test(value):
        error = ValueError if _REAL(value) else TypeError
        raise error(f"{owner}: argument '{arg}' must be {accepts}, got {type(value).__name__} {value!r}")


def _check_clip(owner, grad_clip):
    if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
        raise TypeError(f"{owner}: argument 'grad_clip' must be an oarlock.nn.ClipGradByGlobalNorm, ClipGradByNorm "
                        f"or ClipGradByValue (or None), got {type(grad_clip).__name__}")


def _resolve_aliases(owner, given: dict, aliases: dict, taken=()):
    """Rename torch keys in `given` (in place) to Paddle's; betas=(b1, b2) fills beta1 and beta2. A key
    given both ways (or positionally: `taken`) is an error."""
    for alias, target in aliases.items():
        if alias not in given:
            continue
        value = given.pop(alias)
        targets = target if isinstance(target, tuple) else (target,)
        clash = [t for t in targets if t in given or t in taken]
        if clash:
            raise TypeError(f"{owner}: got both '{clash[0]}' and its torch alias '{alias}'; pass only one")
        if len(targets) > 1:
            if not isinstance(value, (tuple, list)) or len(value) != len(targets):
                raise TypeError(f"{owner}: argument '{alias}' must be a pair ({', '.join(targets)}), "
                                f"got {type(value).__name__} {value!r}")
            given.update(zip(targets, value))
        else:
            given[target] = value


def torch_aliases(**aliases):
    """Class decorator: the optimizer's __init__ also accepts torch's argument names (`aliases`: torch name
    -> Paddle name, or a tuple of names for betas), a parameter list as the first positional argument
    (torch's order), and rejects unknown keywords naming what it accepts."""

    def decorate(cls):
        init = cls.__init__
        names = [n for n in inspect.signature(init).parameters if n != "self"]

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            owner = type(self).__name__
            if args and _looks_like_parameters(args[0]):
                if len(args) > 1:
                    raise TypeError(f"{owner}: with the parameters first (torch's order), pass the other "
                                    f"arguments by name (lr=..., ...); got {len(args)} positional arguments")
                if "parameters" in kwargs or "params" in kwargs:
                    raise TypeError(f"{owner}: got the parameters both positionally and by name")
                kwargs["parameters"], args = args[0], ()
            _resolve_aliases(owner, kwargs, aliases, taken=names[:len(args)])
            unknown = [k for k in kwargs if k not in names]
            if unknown:
                hint = _HINTS.get(unknown[0], "")
                raise TypeError(f"{owner}: unexpected argument '{unknown[0]}'{hint}; it accepts {', '.join(names)} "
                                f"(torch names: {', '.join(aliases)})")
            init(self, *args, **kwargs)

        cls.__init__ = __init__
        cls._torch_aliases = aliases
        return cls

    return decorate


def _looks_like_parameters(value) -> bool:
    if isinstance(value, (Tensor, LRScheduler, numbers.Number, str)):
        return False
    return isinstance(value, (list, tuple)) or inspect.isgenerator(value) or hasattr(value, "__next__")


class Optimizer:
    """The base class of the optimizers (Paddle's oarlock.optimizer.Optimizer).

    - learning_rate: a float or an LRScheduler (stepped by the training loop, not by the optimizer).
    - parameters: a list of Tensors, or of parameter-group dicts {"params": [...], key: value} whose keys
      override the optimizer's arguments for that group. Paddle's "learning_rate" key multiplies the
      optimizer's rate; torch's "lr" key is an absolute rate for the group, which a scheduler does not
      change (as in torch, assigning group["lr"] later sets it).
    - weight_decay: a float, the L2 coefficient (Paddle's L2Decay: added to the gradient) for every
      optimizer but AdamW, whose decay is decoupled.
    - grad_clip: a ClipGradByGlobalNorm, ClipGradByNorm or ClipGradByValue, applied to each group's
      gradients (as Paddle does) before the update; parameters whose ParamAttr has need_clip=False are
      left out.

    Each parameter's rate is the group's rate times its ParamAttr.learning_rate. step() skips parameters
    with stop_gradient=True or no gradient. Subclasses define _update() and, if they keep state,
    _new_state() (or list the zero-initialised tensors in _accumulators).

    multi_precision=True (set by oarlock.amp.decorate(level="O2") too) keeps a float32 master copy of
    each float16/bfloat16 parameter: the update (and the optimizer's moments) are computed in float32 on
    the master, and the parameter receives the master rounded to its dtype. The masters appear in
    state_dict() under "master_weights" ({parameter name: Tensor}, Paddle's layout). A master is made
    at the parameter's first step: assign the parameter before that, or load the optimizer's state.

    Paddle arguments accepted without effect: lazy_mode (oarlock has no sparse gradients) and
    use_multi_tensor (each parameter is already one fused op). The updates never autocast: step() runs
    with autocast off, inside an auto_cast block too.
    """

    _accumulators: tuple = ()
    _torch_aliases: dict = {}

    def __init__(self, learning_rate, parameters=None, weight_decay=None, grad_clip=None, name=None,
                 multi_precision=False, **defaults):
        owner = type(self).__name__
        self._owner = owner
        if isinstance(learning_rate, Tensor) and learning_rate.size == 1:
            learning_rate = learning_rate.item()
        if not isinstance(learning_rate, LRScheduler):
            _check(owner, "learning_rate", learning_rate)
            learning_rate = float(learning_rate)
        self._learning_rate = learning_rate
        _check(owner, "weight_decay", weight_decay)
        _check_clip(owner, grad_clip)
        self._grad_clip = grad_clip
        for key, value in defaults.items():
            if key in CHECKS:
                _check(owner, key, value)
        self._defaults = {"weight_decay": float(weight_decay or 0.0), "grad_clip": grad_clip, **defaults}
        self._name = name
        self._multi_precision = bool(multi_precision)
        self._master_weights: dict[int, Tensor] = {}  # id(param) -> its float32 master (multi_precision)
        self._param_groups: list[dict] = []
        self._state: dict[int, dict] = {}      # id(param) -> {"step": int, accumulator name: Tensor}
        self._keys: dict[int, str] = {}        # id(param) -> its name in state_dict()
        self._step_links: dict[int, list] = {}  # id(param) -> [step tensor, count] (sharded_state_dict)
        if parameters is None:
            raise TypeError(f"{owner}: argument 'parameters' is required (pass model.parameters())")
        if isinstance(parameters, Tensor) or not (isinstance(parameters, (list, tuple)) or
                                                  _looks_like_parameters(parameters)):
            raise TypeError(f"{owner}: argument 'parameters' must be a list of Tensors or of parameter-group "
                            f"dicts, got {type(parameters).__name__}")
        parameters = list(parameters)
        if not parameters:
            raise ValueError(f"{owner}: argument 'parameters' is an empty list; it needs at least one Tensor")
        if all(isinstance(p, dict) for p in parameters):
            for group in parameters:
                self.add_param_group(group)
        else:
            self.add_param_group({"params": parameters})

    # -- parameter groups -------------------------------------------------------------------------------------
    @property
    def param_groups(self) -> list:
        return self._param_groups

    def add_param_group(self, param_group: dict):
        """Add a group {"params": [...], key: value}; keys not given take the optimizer's arguments."""
        owner = self._owner
        group = dict(param_group)
        if "params" not in group:
            raise ValueError(f"{owner}: a parameter group needs a 'params' entry, got keys {sorted(group)}")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{owner}: argument 'parameters' must hold Tensors (or only parameter-group "
                                f"dicts), got {type(p).__name__} at position {i}")
        # in a group, torch's "lr" keeps its torch meaning (an absolute rate), so it is not renamed
        _resolve_aliases(owner, group, {k: v for k, v in self._torch_aliases.items() if k not in ("lr", "params")})
        accepted = {"params", "learning_rate", "lr", *self._defaults}
        unknown = sorted(set(group) - accepted)
        if unknown:
            raise ValueError(f"{owner}: unknown parameter-group key(s) {unknown}; a group accepts "
                             f"{', '.join(sorted(accepted))}")
        for key, value in group.items():
            if key in CHECKS:
                _check(owner, key, value)
        _check_clip(owner, group.get("grad_clip"))
        if group.get("weight_decay") is None:
            group.pop("weight_decay", None)
        group["params"] = params
        group.setdefault("learning_rate", 1.0)
        for key, value in self._defaults.items():
            group.setdefault(key, value)
        group["weight_decay"] = float(group["weight_decay"])
        seen = set(self._keys)
        for p in params:
            if id(p) in seen:
                raise ValueError(f"{owner}: a parameter appears twice (in one group or in two groups)")
            seen.add(id(p))
            self._keys[id(p)] = p.name or f"param_{len(self._keys)}"
        if len(set(self._keys.values())) != len(self._keys):
            raise ValueError(f"{owner}: two parameters share a name; state_dict() keys parameters by name")
        self._param_groups.append(group)

    def _parameters(self):
        return [p for group in self._param_groups for p in group["params"]]

    # -- the learning rate ------------------------------------------------------------------------------------
    def get_lr(self) -> float:
        """The current rate: the scheduler's value, or the float given."""
        lr = self._learning_rate
        return lr.last_lr if isinstance(lr, LRScheduler) else lr

    def set_lr(self, value):
        if isinstance(self._learning_rate, LRScheduler):
            raise RuntimeError(f"{self._owner}.set_lr(): the learning rate is an LRScheduler; step the scheduler, "
                               f"or replace it with set_lr_scheduler()")
        _check(f"{self._owner}.set_lr()", "learning_rate", value)
        self._learning_rate = float(value)

    def set_lr_scheduler(self, scheduler):
        if not isinstance(scheduler, LRScheduler):
            raise TypeError(f"{self._owner}.set_lr_scheduler(): argument 'scheduler' must be an "
                            f"oarlock.optimizer.lr.LRScheduler, got {type(scheduler).__name__}")
        self._learning_rate = scheduler

    # -- stepping -----------------------------------------------------------------------------------------------
    def step(self, closure=None):
        """Update every parameter that has a gradient, group by group: clip, then one fused op each.
        closure (torch's): a function that recomputes the loss and its gradients first; its loss is returned."""
        loss = None
        if closure is not None:
            with oarlock.enable_grad():
                loss = closure()
        if self._step_links:
            sharded_state.sync_step_links(self)   # a step count a checkpoint load wrote in
        lr = self.get_lr()
        with oarlock.no_grad(), suspended():
            for group in self._param_groups:
                pairs = [(p, p.grad) for p in group["params"] if not p.stop_gradient and p.grad is not None]
                if not pairs:
                    continue
                if group["grad_clip"] is not None:
                    group["grad_clip"](pairs)
                group_lr = group["lr"] if "lr" in group else lr * group["learning_rate"]
                state = self._state
                plain = []   # (param, grad, state, rate) of the parameters updated in place, without masters
                for p, g in pairs:
                    attrs = p.param_attrs
                    rate = group_lr if attrs is None else group_lr * attrs.learning_rate
                    master = self._master_of(p) if self._multi_precision else None
                    st = state.get(id(p))
                    if st is None:  # with a master, the moments are float32 too
                        st = state[id(p)] = {"step": 0, **self._new_state(p if master is None else master, group)}
                    if master is None:
                        plain.append((p, g, st, rate))
                    else:
                        with _on_master(p, master):
                            self._update(p, g.astype(master.dtype), st, rate, group)
                if plain:
                    self._update_all(plain, group)
        if self._step_links:
            sharded_state.sync_step_links(self, adopt=False)   # the linked step tensors follow
        return loss

    def _update_all(self, entries, group):
        """Update each (param, grad, state, rate) of a group. Per parameter here; optimizers with a
        multi-tensor op override it to update every parameter of one dtype, device and set of
        hyperparameters in one op call (see _buckets)."""
        for p, g, st, rate in entries:
            self._update(p, g, st, rate, group)

    @staticmethod
    def _buckets(entries, key):
        """{(dtype, place, *key(entry)): [entries]}: the parameters one multi-tensor op call can update."""
        buckets = {}
        for entry in entries:
            p = entry[0]
            buckets.setdefault((p.dtype, p.place, *key(entry)), []).append(entry)
        return buckets

    # -- master weights (multi_precision) -------------------------------------------------------------------------
    _LOW_PRECISION = ("float16", "bfloat16")

    def _master_of(self, param):
        """param's float32 master, made from it on first use; None unless param is float16/bfloat16."""
        master = self._master_weights.get(id(param))
        if master is None and param.dtype.name in self._LOW_PRECISION:
            master = self._master_weights[id(param)] = param.detach().astype("float32")
        return master

    def minimize(self, loss=None, startup_program=None, parameters=None, no_grad_set=None):
        """Paddle's minimize in dynamic-graph mode: step() with the gradients already computed (call
        loss.backward() first). Returns (None, [(param, grad), ...])."""
        pairs = [(p, p.grad) for p in self._parameters() if not p.stop_gradient and p.grad is not None]
        self.step()
        return None, pairs

    def _new_state(self, param, group) -> dict:
        return {name: oarlock.zeros_like(param) for name in self._accumulators}

    def _update(self, param, grad, state, lr, group):
        raise NotImplementedError(f"{self._owner} must define _update()")

    # -- gradients ------------------------------------------------------------------------------------------------
    def clear_grad(self, set_to_zero=True):
        """Paddle's default zeroes the gradients in place (set_to_zero=True); False drops them (grad None)."""
        params = self._parameters()
        if set_to_zero:
            # gradients no one else holds become zeros made only when read (no pass over their memory); the
            # others are zeroed in place, and the next backward stores new gradients instead of adding to zeros
            grads = zero_grads(params)
            if grads:
                with oarlock.no_grad():
                    oarlock.zero_tensors_(grads)
                mark_zero_grads(grads)
        else:
            for p in params:
                p.grad = None

    def zero_grad(self, set_to_none=True):
        """torch's spelling and default: drop the gradients (set_to_none=False zeroes them)."""
        self.clear_grad(set_to_zero=not set_to_none)

    # -- state -----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """{"<param name>_<accumulator>_0": Tensor, "<param name>_step": int, "LR_Scheduler": {...}}. The
        tensors are the optimizer's own (updated in place by later steps, as in Paddle and torch): save or
        clone them before stepping on."""
        if self._step_links:
            sharded_state.sync_step_links(self)
        out = {}
        for p in self._parameters():
            state = self._state.get(id(p))
            if state is None:
                continue
            key = self._keys[id(p)]
            for name, value in state.items():
                out[f"{key}_step" if name == "step" else f"{key}_{name}_0"] = value
        masters = {self._keys[id(p)]: self._master_weights[id(p)] for p in self._parameters()
                   if id(p) in self._master_weights}
        if masters:
            out["master_weights"] = masters
        if isinstance(self._learning_rate, LRScheduler):
            out["LR_Scheduler"] = self._learning_rate.state_dict()
        return out

    def set_state_dict(self, state_dict):
        """Load what state_dict() returned: values are copied into this optimizer's own state."""
        if "state" in state_dict and "param_groups" in state_dict:
            raise ValueError(f"{self._owner}.set_state_dict(): this is a torch optimizer state (keys 'state', "
                             f"'param_groups'); oarlock keys the state by parameter name, as Paddle does")
        used = set()
        masters = state_dict.get("master_weights") or {}
        if "master_weights" in state_dict:
            used.add("master_weights")
        for group in self._param_groups:
            for p in group["params"]:
                key = self._keys[id(p)]
                master = self._master_of(p) if self._multi_precision else None
                if master is not None and key in masters:
                    value = masters[key]
                    master.set_value(value if isinstance(value, Tensor) else oarlock.to_tensor(value))
                if f"{key}_step" not in state_dict:
                    continue
                fresh = self._new_state(p if master is None else master, group)
                for name, tensor in fresh.items():
                    entry = f"{key}_{name}_0"
                    if entry not in state_dict:
                        raise KeyError(f"{self._owner}.set_state_dict(): '{entry}' is missing (parameter {key!r} "
                                       f"has a step count but not its {name})")
                    value = state_dict[entry]
                    tensor.set_value(value if isinstance(value, Tensor) else oarlock.to_tensor(value))
                    used.add(entry)
                self._state[id(p)] = {"step": int(state_dict[f"{key}_step"]), **fresh}
                used.add(f"{key}_step")
        if "LR_Scheduler" in state_dict:
            used.add("LR_Scheduler")
            if isinstance(self._learning_rate, LRScheduler):
                self._learning_rate.set_state_dict(state_dict["LR_Scheduler"])
        unused = sorted(set(state_dict) - used)
        if unused:
            warnings.warn(f"{self._owner}.set_state_dict(): ignored keys that match no parameter: {unused[:5]}"
                          f"{' ...' if len(unused) > 5 else ''}", stacklevel=2)

    def set_dict(self, state_dict):
        self.set_state_dict(state_dict)

    def sharded_state_dict(self, model_sharded_state_dict):
        """Paddle 3.2's: {key: ShardedWeight} of the state, each moment sharded like its parameter in
        `model_sharded_state_dict` (model.sharded_state_dict()), for FlexCheckpoint's save_state_dict /
        load_state_dict (in place). See oarlock_nn.optim.sharded_state."""
        return sharded_state.sharded_state_dict(self, model_sharded_state_dict)

    load_state_dict = set_dict


@contextlib.contextmanager
def _on_master(param, master):
    """Let the update ops write into the float32 master through the parameter itself (so what an
    optimizer keys by parameter -- AdamW's decay function, Lamb's exclusion -- still sees it), then give
    the parameter the master rounded to its own dtype."""
    dtype = param.dtype
    rebind(param, array_of(master))
    try:
        yield
    finally:
        rebind(master, array_of(param))
        rebind(param, array_of(master).astype(dtype.np))
