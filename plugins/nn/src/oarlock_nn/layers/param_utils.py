"""oarlock.nn.utils' parameter reparametrisations and flattening, as Paddle 3.2 has them: weight_norm,
remove_weight_norm, spectral_norm, parameters_to_vector, vector_to_parameters; and the legacy
nn.SpectralNorm layer.

weight_norm(layer, name, dim) replaces parameter `name` by `name_g` (the norms, over every axis but `dim`;
dim=None: one norm of the whole tensor) and `name_v` (the direction), and recomputes
`name = g * v / ||v||` in a forward pre-hook, so gradients reach g and v. spectral_norm(layer) keeps the
parameter as `name_orig` with buffers `name_u` / `name_v`; each training-mode forward runs
n_power_iterations of the power method on them (without gradient) and divides the weight by
sigma = u . (W v), W the weight as a matrix with axis `dim` first (dim 1 for Linear and the transposed
convolutions, whose output features are axis 1 in Paddle's layouts).
"""

from __future__ import annotations

import math
import numbers

import oarlock
from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import Linear
from oarlock_nn.layers.initializer import Normal

NORM_EPSILON = 1e-12   # Paddle's: added under the square root of g, the floor of ||v||


def _norm_except(p, dim, keep):
    """sqrt(sum of squares + eps) over every axis but `dim` (dim -1: all), shaped [p.shape[dim]] or []; with
    keep=True shaped to broadcast against p."""
    if dim == -1:
        out = oarlock.sqrt(oarlock.sum(oarlock.square(p)) + NORM_EPSILON)
        return out
    axes = [a for a in range(p.ndim) if a != dim]
    return oarlock.sqrt(oarlock.sum(oarlock.square(p), axis=axes, keepdim=keep) + NORM_EPSILON)


class WeightNorm:
    """The forward pre-hook of weight_norm: sets layer.<name> from <name>_g and <name>_v."""

    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def compute_weight(self, layer):
        g = getattr(layer, self.name + "_g")
        v = getattr(layer, self.name + "_v")
        if self.dim == -1:
            return v / (oarlock.sqrt(oarlock.sum(oarlock.square(v))) + NORM_EPSILON) * g
        axes = [a for a in range(v.ndim) if a != self.dim]
        norm = oarlock.sqrt(oarlock.sum(oarlock.square(v), axis=axes, keepdim=True))
        shape = [1] * v.ndim
        shape[self.dim] = v.shape[self.dim]
        return v / oarlock.clip(norm, min=NORM_EPSILON) * oarlock.reshape(g, shape)

    def __call__(self, layer, inputs):
        setattr(layer, self.name, self.compute_weight(layer))

    def remove(self, layer):
        weight = self.compute_weight(layer).detach()
        delattr(layer, self.name)
        del layer._parameters[self.name + "_g"]
        del layer._parameters[self.name + "_v"]
        layer.add_parameter(self.name, _parameter_like(layer, weight))


def _parameter_like(layer, value):
    """A new parameter of layer holding a copy of value."""
    parameter = layer.create_parameter(value.shape, dtype=value.dtype)
    with oarlock.no_grad():
        parameter.copy_(value)
    return parameter


def _hooks_of(layer, kind, name):
    return [(key, hook) for key, hook in layer._forward_pre_hooks.items()
            if isinstance(hook, kind) and hook.name == name]


def weight_norm(layer, name="weight", dim=0):
    """Reparametrise layer.<name> as g * v / ||v|| (see the module docstring); returns the layer."""
    if not isinstance(layer, Layer):
        raise TypeError(f"weight_norm: layer must be a Layer, got {type(layer).__name__}")
    if _hooks_of(layer, WeightNorm, name):
        raise RuntimeError(f"weight_norm: the parameter {name!r} of this layer already has weight_norm")
    if layer._parameters.get(name) is None:
        raise ValueError(f"weight_norm: {type(layer).__name__} has no parameter {name!r}")
    weight = layer._parameters[name]
    if dim is None:
        dim = -1
    if not isinstance(dim, numbers.Integral) or not -weight.ndim <= dim < weight.ndim:
        raise ValueError(f"weight_norm: dim must be None or in [{-weight.ndim}, {weight.ndim}) for the "
                         f"{weight.ndim}-D {name!r}, got {dim!r}")
    if dim != -1:
        dim %= weight.ndim
    hook = WeightNorm(name, dim)
    g = _norm_except(weight, dim, keep=False).detach()
    del layer._parameters[name]
    layer.add_parameter(name + "_v", _parameter_like(layer, weight.detach()))
    layer.add_parameter(name + "_g", _parameter_like(layer, g))
    setattr(layer, name, hook.compute_weight(layer))
    layer.register_forward_pre_hook(hook)
    return layer


def remove_weight_norm(layer, name="weight"):
    """Undo weight_norm: layer.<name> becomes a parameter again, holding the current g * v / ||v||."""
    hooks = _hooks_of(layer, WeightNorm, name)
    if not hooks:
        raise ValueError(f"remove_weight_norm: weight_norm of {name!r} was not found in {type(layer).__name__}")
    key, hook = hooks[0]
    hook.remove(layer)
    del layer._forward_pre_hooks[key]
    return layer


def _as_matrix(weight, dim):
    if dim != 0:
        weight = oarlock.transpose(weight, [dim] + [a for a in range(weight.ndim) if a != dim])
    return oarlock.reshape(weight, [weight.shape[0], -1])


def _power_iteration(matrix, u, v, iterations, eps):
    """u, v after `iterations` steps of the power method on matrix (no gradient), written into u and v."""
    with oarlock.no_grad():
        for _ in range(iterations):
            v.copy_(F.normalize(oarlock.matmul(matrix, u, transpose_x=True), axis=0, epsilon=eps))
            u.copy_(F.normalize(oarlock.matmul(matrix, v), axis=0, epsilon=eps))


class SpectralNormHook:
    """The forward pre-hook of spectral_norm."""

    def __init__(self, name, n_power_iterations, dim, eps):
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps

    def compute_weight(self, layer, do_power_iteration):
        weight = getattr(layer, self.name + "_orig")
        u, v = getattr(layer, self.name + "_u"), getattr(layer, self.name + "_v")
        matrix = _as_matrix(weight, self.dim)
        if do_power_iteration:
            _power_iteration(matrix.detach(), u, v, self.n_power_iterations, self.eps)
            u, v = u.clone(), v.clone()
        sigma = oarlock.sum(u * oarlock.matmul(matrix, v))
        return weight / sigma

    def __call__(self, layer, inputs):
        setattr(layer, self.name, self.compute_weight(layer, do_power_iteration=layer.training))


def spectral_norm(layer, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide layer.<name> by its largest singular value, estimated by the power method (see the module
    docstring); returns the layer."""
    if not isinstance(layer, Layer):
        raise TypeError(f"spectral_norm: layer must be a Layer, got {type(layer).__name__}")
    if not isinstance(n_power_iterations, numbers.Integral) or n_power_iterations <= 0:
        raise ValueError(f"spectral_norm: n_power_iterations must be a positive int, got {n_power_iterations!r}")
    if _hooks_of(layer, SpectralNormHook, name):
        raise RuntimeError(f"spectral_norm: the parameter {name!r} of this layer already has spectral_norm")
    weight = layer._parameters.get(name)
    if weight is None:
        raise ValueError(f"spectral_norm: {type(layer).__name__} has no parameter {name!r}")
    if dim is None:
        transposed = tuple(getattr(oarlock.nn, n) for n in ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")
                           if hasattr(oarlock.nn, n))
        dim = 1 if isinstance(layer, (Linear, *transposed)) else 0
    hook = SpectralNormHook(name, n_power_iterations, dim, eps)
    h, w = _as_matrix(weight, dim).shape
    u = F.normalize(oarlock.standard_normal([h], dtype=weight.dtype), axis=0, epsilon=eps)
    v = F.normalize(oarlock.standard_normal([w], dtype=weight.dtype), axis=0, epsilon=eps)
    del layer._parameters[name]
    layer.add_parameter(name + "_orig", weight)
    setattr(layer, name, weight * 1.0)
    layer.register_buffer(name + "_u", u)
    layer.register_buffer(name + "_v", v)
    layer.register_forward_pre_hook(hook)
    return layer


def parameters_to_vector(parameters, name=None):
    """The parameters flattened and concatenated into one 1-D tensor (a copy, wanting a gradient)."""
    parameters = list(parameters)
    if not parameters:
        raise ValueError("parameters_to_vector: parameters must not be empty")
    with oarlock.no_grad():
        out = oarlock.concat([oarlock.reshape(p, [-1]) for p in parameters])
    out.stop_gradient = False
    return out


def vector_to_parameters(vec, parameters, name=None):
    """Copy consecutive slices of the 1-D vec into the parameters (vec may be longer than they need)."""
    parameters = list(parameters)
    if not isinstance(vec, oarlock.Tensor) or vec.ndim != 1:
        raise ValueError(f"vector_to_parameters: vec must be a 1-D Tensor, got "
                         f"{vec.shape if isinstance(vec, oarlock.Tensor) else type(vec).__name__}")
    total = sum(math.prod(p.shape) for p in parameters)
    if total > vec.shape[0]:
        raise ValueError(f"vector_to_parameters: the parameters hold {total} elements, more than vec's "
                         f"{vec.shape[0]}")
    with oarlock.no_grad():
        start = 0
        for p in parameters:
            n = math.prod(p.shape)
            p.copy_(oarlock.reshape(vec[start:start + n], p.shape))
            start += n


class SpectralNorm(Layer):
    """SpectralNorm(weight_shape, dim=0, power_iters=1, eps=1e-12, dtype='float32'): forward(weight) returns
    weight / sigma, sigma estimated from the parameters weight_u [h] and weight_v [w] (normal-initialised,
    no gradient) after power_iters steps of the power method, which (as Paddle's kernel) start from the
    stored vectors every call and do not update them. The weight's gradient holds u and v fixed, as the
    spectral_norm hook and torch do (Paddle's legacy kernel gives another for a non-constant upstream)."""

    def __init__(self, weight_shape, dim=0, power_iters=1, eps=1e-12, dtype="float32"):
        super().__init__(dtype=dtype)
        self._weight_shape = [int(s) for s in weight_shape]
        if dim not in (0, 1) or len(self._weight_shape) < 2 or power_iters < 0:
            raise ValueError(f"SpectralNorm: need a weight of at least 2 axes, dim 0 or 1 (as Paddle) and "
                             f"power_iters >= 0, got weight_shape={self._weight_shape}, dim={dim!r}, "
                             f"power_iters={power_iters!r}")
        self._dim, self._power_iters, self._eps = dim, power_iters, eps
        h = self._weight_shape[dim]
        w = math.prod(self._weight_shape) // h
        self.weight_u = self.create_parameter([h], default_initializer=Normal(0.0, 1.0))
        self.weight_v = self.create_parameter([w], default_initializer=Normal(0.0, 1.0))
        self.weight_u.stop_gradient = True
        self.weight_v.stop_gradient = True

    def forward(self, weight):
        matrix = _as_matrix(weight, self._dim)
        u, v = self.weight_u.detach().clone(), self.weight_v.detach().clone()
        _power_iteration(matrix.detach(), u, v, self._power_iters, self._eps)
        return weight / oarlock.sum(u * oarlock.matmul(matrix, v))


EXPORTS = {"oarlock.nn.utils": [weight_norm, remove_weight_norm, spectral_norm, parameters_to_vector,
                                vector_to_parameters],
           "oarlock.nn": [SpectralNorm]}
