"""Reading an optimizer state that Paddle 3.2 wrote (a `.pdopt` of paddle.Model.save or paddle.save of
optimizer.state_dict()) into an oarlock optimizer.

Paddle keys accumulators by its global parameter names (`linear_0.w_0_moment1_0`) and keeps Adam's step as the
powers `beta1_pow_acc` / `beta2_pow_acc` (beta^(t+1) after t steps: the power starts at beta and is multiplied
after each update). oarlock keys them by the optimizer's parameter keys (the parameter's name, else `param_<i>`
in the optimizer's order) with an explicit `<key>_step`. The Paddle name of each parameter comes from the
`StructuredToParameterName@@` table Paddle saves with the state (structured name -> parameter name), matched
to the network's structured names; without that table, from the order in which the state first names each
parameter (Paddle creates accumulators in the optimizer's parameter order)."""

from __future__ import annotations

import math

import numpy as np

NAME_TABLE = "StructuredToParameterName@@"
_KEEP = ("LR_Scheduler",)


def is_paddle_layout(state: dict) -> bool:
    """True for Paddle's layout: accumulators without oarlock's `<key>_step` entries."""
    keys = [k for k in state if isinstance(k, str) and k not in _KEEP and k not in (NAME_TABLE, "master_weights")]
    return bool(keys) and not any(k.endswith("_step") for k in keys)


def optimizer_keys(optimizer) -> list:
    """[(parameter, key)] in the optimizer's order, the keys its state_dict() uses."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return [(p, p.name or f"param_{i}") for i, p in enumerate(params)]


def _paddle_names_in_order(state: dict) -> list:
    """Parameter names in the order the state first mentions them."""
    names = []
    for key in state:
        if not isinstance(key, str) or key in _KEEP or key in (NAME_TABLE, "master_weights"):
            continue
        for marker in ("_moment", "_beta1_pow_acc", "_beta2_pow_acc", "_velocity", "_mean_square", "_mean_grad"):
            if marker in key:
                name = key[:key.index(marker)]
                if name not in names:
                    names.append(name)
                break
    return names


def _scalar(value) -> float:
    return float(np.asarray(value.numpy() if hasattr(value, "numpy") else value).reshape(-1)[0])


def convert(owner: str, optimizer, state: dict, network, name_table=None) -> dict:
    """`state` (Paddle's layout) rekeyed for `optimizer`, whose parameters belong to `network`."""
    name_table = name_table or state.get(NAME_TABLE) or {}
    pairs = optimizer_keys(optimizer)
    if name_table:
        by_id = {id(p): name_table.get(structured) for structured, p in network.named_parameters()}
        paddle_names = [by_id.get(id(p)) for p, _ in pairs]
    else:
        in_state = _paddle_names_in_order(state)
        if len(in_state) > len(pairs):
            raise ValueError(f"{owner}: the optimizer state names {len(in_state)} parameters but the optimizer "
                             f"has {len(pairs)}")
        paddle_names = in_state + [None] * (len(pairs) - len(in_state))
    out = {k: state[k] for k in _KEEP if k in state}
    used = set()
    masters = state.get("master_weights") or {}
    for (param, key), name in zip(pairs, paddle_names):
        if name is None:
            continue
        prefix = f"{name}_"
        entries = {k[len(prefix):]: v for k, v in state.items()
                   if isinstance(k, str) and k.startswith(prefix) and k.endswith("_0") and k not in used}
        if not entries:
            continue
        used.update(prefix + k for k in entries)
        group = next(g for g in optimizer.param_groups if any(p is param for p in g["params"]))
        step = 0
        pow1 = entries.pop("beta1_pow_acc_0", None)
        entries.pop("beta2_pow_acc_0", None)
        if pow1 is not None and "beta1" in group:
            # beta1^(t+1) after t steps
            step = max(0, round(math.log(_scalar(pow1)) / math.log(float(group["beta1"]))) - 1)
        for acc, value in entries.items():
            out[f"{key}_{acc}"] = value
        out[f"{key}_step"] = step
        if name in masters:
            out.setdefault("master_weights", {})[key] = masters[name]
    return out
