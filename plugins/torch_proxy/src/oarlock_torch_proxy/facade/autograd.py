"""torch.autograd over oarlock's autograd: backward, grad, no_grad / enable_grad / set_grad_enabled, and
torch.autograd.Function with a torch-style ctx (save_for_backward, saved_tensors, needs_input_grad,
mark_non_differentiable, set_materialize_grads) built on oarlock's PyLayer."""

from __future__ import annotations

import oarlock

from oarlock_torch_proxy.missing import missing_getattr

no_grad, enable_grad, set_grad_enabled = oarlock.no_grad, oarlock.enable_grad, oarlock.set_grad_enabled


class Function(oarlock.autograd.PyLayer):
    """torch.autograd.Function: static forward(ctx, *args) and backward(ctx, *grads), called via apply.

    torch counts arguments, not tensors: ctx.needs_input_grad has one entry per argument, and backward returns
    one gradient per argument (None for the non-tensors). oarlock's PyLayer counts tensors, so apply runs an
    adapter subclass (made once per Function class) that converts both ways. The newer split form
    (forward without ctx plus setup_context(ctx, inputs, output)) works too."""

    @classmethod
    def apply(cls, *args, **kwargs):
        adapter = cls.__dict__.get("_torch_adapter")
        if adapter is None:
            adapter = _adapter(cls)
            type.__setattr__(cls, "_torch_adapter", adapter)
        return oarlock.autograd.PyLayer.apply.__func__(adapter, *args, **kwargs)


def _adapter(cls):
    split = hasattr(cls, "setup_context")   # Function itself has none: the class uses the split form
    forward, backward = cls.forward, cls.backward

    class Adapter(oarlock.autograd.PyLayer):
        @staticmethod
        def forward(ctx, *args, **kwargs):
            ctx.needs_input_grad = tuple(isinstance(a, oarlock.Tensor) and not a.stop_gradient for a in args)
            ctx._tensor_positions = [i for i, a in enumerate(args) if isinstance(a, oarlock.Tensor)]
            if split:
                out = forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
                return out
            return forward(ctx, *args, **kwargs)

        @staticmethod
        def backward(ctx, *grads):
            result = backward(ctx, *grads)
            result = result if isinstance(result, (tuple, list)) else (result,)
            return tuple(result[i] if i < len(result) else None for i in ctx._tensor_positions)

    Adapter.__name__ = Adapter.__qualname__ = cls.__name__
    return Adapter


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    if create_graph or inputs is not None:
        from oarlock_torch_proxy.missing import not_implemented
        not_implemented("torch.autograd.backward", "with create_graph or inputs")
    if isinstance(tensors, oarlock.Tensor):
        tensors = [tensors]
    if isinstance(grad_tensors, oarlock.Tensor):
        grad_tensors = [grad_tensors]
    oarlock.autograd.backward(list(tensors), grad_tensors, retain_graph=bool(retain_graph))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    single = isinstance(inputs, oarlock.Tensor)
    result = oarlock.grad(outputs, [inputs] if single else list(inputs), grad_outputs=grad_outputs,
                          retain_graph=retain_graph, create_graph=create_graph, allow_unused=bool(allow_unused))
    if materialize_grads:
        ins = [inputs] if single else list(inputs)
        result = [oarlock.zeros_like(i) if g is None else g for g, i in zip(result, ins)]
    return tuple(result)


class _FunctionCtxNamespace:
    FunctionCtx = oarlock.autograd.PyLayerContext


function = _FunctionCtxNamespace()
__getattr__ = missing_getattr("torch.autograd")
