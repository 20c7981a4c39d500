"""torch.nn.utils: gradient clipping (clip_grad_norm_, clip_grad_value_) and parameter/vector conversion."""

from __future__ import annotations

import oarlock

from oarlock_torch_proxy.missing import missing_getattr


def _grads(parameters):
    if isinstance(parameters, oarlock.Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale every gradient in place so their joint norm is at most max_norm; returns the norm before."""
    grads = _grads(parameters)
    if not grads:
        return oarlock.zeros([])
    norm_type = float(norm_type)
    with oarlock.no_grad():
        if norm_type == float("inf"):
            total = oarlock.stack([g.abs().max() for g in grads]).max()
        else:
            total = oarlock.stack([(g.abs() ** norm_type).sum() for g in grads]).sum() ** (1.0 / norm_type)
        if error_if_nonfinite and not bool(oarlock.isfinite(total)):
            raise RuntimeError(f"clip_grad_norm_(): the total norm of order {norm_type} is non-finite")
        coef = oarlock.clip(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.copy_(g * coef.astype(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    with oarlock.no_grad():
        for g in _grads(parameters):
            g.copy_(oarlock.clip(g, -clip_value, clip_value))


def parameters_to_vector(parameters):
    return oarlock.concat([p.reshape([-1]) for p in parameters])


def vector_to_parameters(vec, parameters):
    offset = 0
    with oarlock.no_grad():
        for p in parameters:
            n = p.numel().item() if isinstance(p.numel(), oarlock.Tensor) else p.numel()
            p.copy_(vec[offset:offset + n].reshape(p.shape))
            offset += n


from oarlock_torch_proxy.facade.nn.utils import rnn  # noqa: E402

__getattr__ = missing_getattr("torch.nn.utils")
