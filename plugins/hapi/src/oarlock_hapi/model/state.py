"""Model.save / Model.load: the files Paddle's hapi writes and reads, through oarlock.save / oarlock.load.

`path.pdparams` holds network.state_dict(), `path.pdopt` the optimizer's state_dict() (only when it has
accumulators or a scheduler: plain SGD writes none), `path.pdscaler` the AMP GradScaler's. Loading matches
parameters by structured name and shape, and reads optimizer states written by Paddle 3.2 as well as ours
(paddle_optimizer_state)."""

from __future__ import annotations

import os
import warnings

import numpy as np

import oarlock
from oarlock_hapi.model import paddle_optimizer_state
from oarlock_hapi.ranks import local_rank

SUFFIXES = ("", ".pdparams", ".pdopt", ".pdmodel")


def save(model, path: str, training: bool = True) -> None:
    """Write the checkpoint files for `path` (a prefix, 'dir/name'); on local rank 0 only."""
    if not isinstance(path, str) or not os.path.basename(path):
        raise ValueError(f"Model.save(): argument 'path' must be a file prefix 'dirname/file_prefix', got {path!r}")
    if local_rank() != 0:
        return
    if not training:
        save_inference(model, path)
        return
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    oarlock.save(model.network.state_dict(), path + ".pdparams")
    if model._optimizer is not None:
        optim = model._optimizer.state_dict()
        if has_optimizer_state(optim):
            oarlock.save(optim, path + ".pdopt")
    if model._scaler is not None:
        scaler = model._scaler.state_dict()
        if scaler:
            oarlock.save(scaler, path + ".pdscaler")


def has_optimizer_state(optim: dict) -> bool:
    """Whether there is state worth a .pdopt: Paddle writes none for an optimizer without accumulators (plain
    SGD); oarlock's keeps a step count per parameter even then, which alone is not written either."""
    return any(not (isinstance(key, str) and key.endswith("_step")) for key in optim)


def save_inference(model, path: str) -> None:
    """save(training=False): the inference program, through oarlock.jit.save when a plugin provides it."""
    if model._input_info is None and not model._inputs_given:
        raise RuntimeError("Model.save(training=False): saving an inference model needs 'inputs' or running "
                           "before saving. Please specify 'inputs' in Model initialization or input training data "
                           "and perform a training for shape derivation.")
    try:
        jit_save = oarlock.jit.save
    except (AttributeError, ImportError) as error:
        raise NotImplementedError("Model.save(training=False): saving an inference model needs oarlock.jit.save, "
                                  f"which no installed plugin provides ({error}); save with training=True") from None
    jit_save(model.network, path, input_spec=model._inputs)


def strip_suffix(path: str) -> str:
    root, ext = os.path.splitext(path)
    if ext not in SUFFIXES:
        raise ValueError(f"Model.load(): argument 'path' has the unknown suffix {ext!r}; give the prefix or a "
                         f"file ending in {', '.join(s for s in SUFFIXES if s)}, got {path!r}")
    return root


def _shape(value) -> list:
    return list(value.shape)


def _matched_parameters(model, param_state: dict, skip_mismatch: bool):
    """[(tensor, value)] for every entry of network.state_dict(), and whether anything was skipped."""
    matched, skipped = [], False
    for key, param in model.network.state_dict().items():
        value = param_state.get(key)
        if value is None:
            problem = f"{key} is not found in the providing file."
        elif _shape(value) != list(param.shape):
            problem = f"{key} receives a shape {_shape(value)}, but the expected shape is {list(param.shape)}."
        else:
            matched.append((param, value))
            continue
        if not skip_mismatch:
            raise ValueError(f"Model.load(): {problem}")
        warnings.warn(f"Skip loading for {key}. {problem}", stacklevel=3)
        skipped = True
    return matched, skipped


def load(model, path: str, skip_mismatch: bool = False, reset_optimizer: bool = False) -> None:
    """Restore parameters from `path.pdparams` and, unless reset_optimizer (or a parameter was skipped), the
    optimizer from `path.pdopt` and the GradScaler from `path.pdscaler` when those exist."""
    if not isinstance(path, str):
        raise TypeError(f"Model.load(): argument 'path' must be a str, got {type(path).__name__}")
    path = strip_suffix(path)
    if not os.path.exists(path + ".pdparams"):
        raise ValueError(f"Model.load(): Failed to load parameters, please check path: {path + '.pdparams'} "
                         f"does not exist")
    param_state = dict(oarlock.load(path + ".pdparams"))
    name_table = param_state.pop(paddle_optimizer_state.NAME_TABLE, None)
    matched, skipped = _matched_parameters(model, param_state, skip_mismatch)
    with oarlock.no_grad():
        for param, value in matched:
            param.set_value(value if isinstance(value, oarlock.Tensor) else np.asarray(value))
    if model._scaler is not None and os.path.exists(path + ".pdscaler"):
        model._scaler.load_state_dict(oarlock.load(path + ".pdscaler"))
    if reset_optimizer or skipped or model._optimizer is None or not os.path.exists(path + ".pdopt"):
        return
    optim_state = dict(oarlock.load(path + ".pdopt"))
    if paddle_optimizer_state.is_paddle_layout(optim_state):
        optim_state = paddle_optimizer_state.convert("Model.load()", model._optimizer, optim_state, model.network,
                                                     name_table)
    optim_state.pop(paddle_optimizer_state.NAME_TABLE, None)
    model._optimizer.set_state_dict(optim_state)
