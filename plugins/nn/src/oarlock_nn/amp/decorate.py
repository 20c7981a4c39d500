"""decorate (Paddle's amp.decorate): prepare models and optimizers for O2 ("pure" low precision).

O2 casts the floating parameters and buffers of every layer to float16/bfloat16, except those of the
normalisation layers (their ops compute in float32, and their statistics need its range) and of the
layers excluded by the caller, and turns on the optimizers' float32 master weights (multi_precision).
O1 changes nothing. Unlike Paddle, LayerNorm and the other normalisation layers also keep float32
parameters with bfloat16 (Paddle casts LayerNorm's to bfloat16 and keeps only BatchNorm's).
"""

from __future__ import annotations

import functools
import warnings
from collections import OrderedDict

import oarlock
from oarlock.plugin_api import array_of, rebind
from oarlock_nn.amp.autocast import _check_dtype
from oarlock_nn.layers.base import Layer

# the normalisation layers whose parameters stay float32 (those that exist: looked up at call time)
NORM_LAYERS = ("LayerNorm", "RMSNorm", "BatchNorm", "BatchNorm1D", "BatchNorm2D", "BatchNorm3D", "SyncBatchNorm",
               "GroupNorm", "InstanceNorm1D", "InstanceNorm2D", "InstanceNorm3D")
SAVE_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _norm_types():
    found = []
    for name in NORM_LAYERS:
        try:
            found.append(getattr(oarlock.nn, name))
        except AttributeError:
            continue
    return tuple(found)


def _as_list(value, kind, accepts, arg):
    """(items, was_a_list) for a single object or a list of them; raises naming the bad one."""
    items, is_list = (list(value), True) if isinstance(value, (list, tuple)) else ([value], False)
    for item in items:
        if not isinstance(item, kind):
            raise TypeError(f"decorate(): argument '{arg}' must be {accepts} or a list of them, got "
                            f"{type(item).__name__}")
    return items, is_list


def _excluded(models, excluded_layers):
    """The ids of the layers whose parameters stay float32 (Paddle's excluded_layers: instances, with
    their sublayers, and layer classes)."""
    if excluded_layers is None:
        return set()
    items = excluded_layers if isinstance(excluded_layers, list) else [excluded_layers]
    instances, types = [], []
    for item in items:
        if isinstance(item, Layer):
            instances.append(item)
        elif isinstance(item, type) and issubclass(item, Layer):
            types.append(item)
        else:
            raise TypeError(f"decorate(): argument 'excluded_layers' must be a Layer, a Layer class or a list of "
                            f"them, got {type(item).__name__} {item!r}")
    ids = {id(sub) for layer in instances for sub in layer.sublayers(include_self=True)}
    if types:
        ids |= {id(sub) for model in models for sub in model.sublayers(include_self=True)
                if isinstance(sub, tuple(types))}
    return ids


def _cast_own_tensors(layer, dtype):
    """Cast layer's own floating parameters and buffers (and gradients), in place, so that optimizers
    and other references keep seeing the same tensors; sublayers are left to their own turn."""
    with oarlock.no_grad():
        for t in [*layer._parameters.values(), *layer._buffers.values()]:
            if t is None or not t.dtype.is_floating_point or t.dtype == dtype:
                continue
            cast = t.astype(dtype)
            rebind(t, array_of(cast))
            if t.grad is not None:
                t.grad = t.grad.astype(dtype)
    layer._dtype = oarlock.dtypes.convert_dtype(dtype)


def _save_as(model, save_dtype):
    """Make model.state_dict() return its floating tensors cast to save_dtype (copies), as Paddle's
    state-dict hook does; use_hook=False gives the tensors themselves."""
    state_dict = model.state_dict

    @functools.wraps(state_dict)
    def cast_state_dict(*args, use_hook=True, **kwargs):
        out = state_dict(*args, use_hook=use_hook, **kwargs)
        if not use_hook:
            return out
        with oarlock.no_grad():
            return OrderedDict((k, v.astype(save_dtype) if v.dtype.is_floating_point else v) for k, v in out.items())

    object.__setattr__(model, "state_dict", cast_state_dict)


def decorate(models, optimizers=None, level="O1", dtype="float16", master_weight=None, save_dtype=None,
             master_grad=False, excluded_layers=None):
    """Prepare models (a Layer or a list) and optimizers (one or a list) for level "O2": cast the floating
    parameters and buffers to `dtype` except in normalisation layers and excluded_layers (Layers, with
    their sublayers, or Layer classes), and give the optimizers float32 master weights unless
    master_weight=False. save_dtype makes the models' state_dict() cast floating tensors to it.
    Level "O1" returns everything unchanged. Returns models, or (models, optimizers), each as given
    (one object or a list)."""
    if level not in ("O1", "O2"):
        raise ValueError(f"decorate(): level must be 'O1' (mixed precision: decorate changes nothing) or 'O2' "
                         f"(low-precision parameters), got {level!r}")
    dtype = _check_dtype(dtype, "decorate()")
    if master_weight is not None and not isinstance(master_weight, bool):
        raise TypeError(f"decorate(): argument 'master_weight' must be None or a bool, got "
                        f"{type(master_weight).__name__} {master_weight!r}")
    if save_dtype is not None:
        save_name = save_dtype.name if isinstance(save_dtype, oarlock.dtypes.DType) else save_dtype
        if save_name not in SAVE_DTYPES:
            raise ValueError(f"decorate(): save_dtype must be None or one of {', '.join(map(repr, SAVE_DTYPES))}, "
                             f"got {save_dtype!r}")
    if level == "O1":
        return models if optimizers is None else (models, optimizers)
    model_list, models_is_list = _as_list(models, Layer, "an oarlock.nn.Layer", "models")
    optimizer_list, optimizers_is_list = ([], False) if optimizers is None else _as_list(
        optimizers, oarlock.optimizer.Optimizer, "an oarlock.optimizer.Optimizer", "optimizers")
    keep = _norm_types()
    excluded = _excluded(model_list, excluded_layers)
    for model in model_list:
        for layer in model.sublayers(include_self=True):
            if isinstance(layer, keep) or id(layer) in excluded or not getattr(layer, "_cast_to_low_precision", True):
                continue
            _cast_own_tensors(layer, dtype)
    for optimizer in optimizer_list:
        optimizer._multi_precision = master_weight is not False
    if master_grad:
        warnings.warn("decorate(): master_grad=True is not supported: gradients stay in their parameters' dtype "
                      "(the master-weight update still computes in float32)", stacklevel=2)
    if save_dtype is not None:
        for model in model_list:
            _save_as(model, save_name)
    models = model_list if models_is_list else model_list[0]
    if optimizers is None:
        return models
    return models, (optimizer_list if optimizers_is_list else optimizer_list[0])


def amp_decorate(models, optimizers=None, level="O1", dtype="float16", master_weight=None, save_dtype=None,
                 master_grad=False, excluded_layers=None):
    """Paddle's older name of decorate (same arguments)."""
    return decorate(models, optimizers, level, dtype, master_weight, save_dtype, master_grad, excluded_layers)
