"""torch.utils.checkpoint: activation checkpointing trades memory for recomputation and gives the same values
and gradients, so the façade runs the function directly (oarlock keeps the activations)."""

from __future__ import annotations

from oarlock_torch_proxy.missing import missing_getattr


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state=True, **kwargs):
    return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    for fn in (functions.children() if hasattr(functions, "children") else functions):
        input = fn(input)
    return input


__getattr__ = missing_getattr("torch.utils.checkpoint")
