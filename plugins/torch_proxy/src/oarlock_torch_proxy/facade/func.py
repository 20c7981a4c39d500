"""torch.func, eagerly: vmap maps a function over a dimension with a Python loop and stacks the results,
grad / grad_and_value differentiate with oarlock.grad, functional_call runs a module with other tensors in
place of its parameters and buffers. Same values as torch's transforms, without their speed."""

from __future__ import annotations

import functools

import oarlock

from oarlock_torch_proxy.missing import missing_getattr, not_implemented


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    @functools.wraps(func)
    def mapped(*args):
        dims = in_dims if isinstance(in_dims, (tuple, list)) else [in_dims] * len(args)
        sizes = {a.shape[d] for a, d in zip(args, dims) if d is not None and isinstance(a, oarlock.Tensor)}
        if len(sizes) != 1:
            raise ValueError(f"vmap(): the mapped dimensions must have one size, got {sorted(sizes)}")
        results = []
        for i in range(sizes.pop()):
            results.append(func(*[a if d is None else oarlock.index_select(a, oarlock.to_tensor([i]), axis=d)
                                  .squeeze(d) for a, d in zip(args, dims)]))
        if isinstance(results[0], tuple):
            return tuple(oarlock.stack(list(r), axis=out_dims) for r in zip(*results))
        return oarlock.stack(results, axis=out_dims)
    return mapped


def grad_and_value(func, argnums=0, has_aux=False):
    @functools.wraps(func)
    def run(*args, **kwargs):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        args = list(args)
        for n in nums:
            args[n] = args[n].detach()
            args[n].stop_gradient = False
        with oarlock.enable_grad():
            out = func(*args, **kwargs)
            value, aux = (out[0], out[1]) if has_aux else (out, None)
            grads = oarlock.grad(value, [args[n] for n in nums], create_graph=oarlock.is_grad_enabled())
        grads = grads[0] if isinstance(argnums, int) else tuple(grads)
        return (grads, (value, aux)) if has_aux else (grads, value)
    return run


def grad(func, argnums=0, has_aux=False):
    inner = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def run(*args, **kwargs):
        grads, value = inner(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads
    return run


def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *, tie_weights=True, strict=False):
    if isinstance(parameter_and_buffer_dicts, (list, tuple)):
        merged = {}
        for d in parameter_and_buffer_dicts:
            merged.update(d)
        parameter_and_buffer_dicts = merged
    args = args if isinstance(args, tuple) else (args,)
    saved = {}
    try:
        for name, value in parameter_and_buffer_dicts.items():
            owner_path, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_path)
            table = owner._parameters if leaf in owner._parameters else owner._buffers if leaf in owner._buffers \
                else None
            if table is None:
                not_implemented("torch.func.functional_call", f"with a name that is no parameter or buffer: {name}")
            saved[name] = (table, leaf, table[leaf])
            table[leaf] = value
        return module(*args, **(kwargs or {}))
    finally:
        for table, leaf, value in saved.values():
            table[leaf] = value


__getattr__ = missing_getattr("torch.func")
