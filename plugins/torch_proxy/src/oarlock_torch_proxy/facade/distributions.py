"""torch.distributions: Normal and Categorical (sample / rsample / log_prob / entropy), the two that
transformer and RL libraries reach for; other distributions are reported as missing."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy.missing import missing_getattr


def _tensor(value, like=None):
    if isinstance(value, oarlock.Tensor):
        return value
    return oarlock.full([], float(value), dtype=like.dtype if like is not None else "float32")


class Distribution:
    def sample(self, sample_shape=()):
        with oarlock.no_grad():
            return self.rsample(sample_shape)


class Normal(Distribution):
    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = _tensor(loc), _tensor(scale)
        self.loc, self.scale = oarlock.broadcast_tensors([self.loc, self.scale])

    @property
    def mean(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale ** 2

    def rsample(self, sample_shape=()):
        shape = [*sample_shape, *self.loc.shape]
        return self.loc + self.scale * oarlock.randn(shape, dtype=self.loc.dtype)

    def log_prob(self, value):
        return -((value - self.loc) ** 2) / (2 * self.scale ** 2) - oarlock.log(self.scale) - \
            0.5 * math.log(2 * math.pi)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + oarlock.log(self.scale)


class Categorical(Distribution):
    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Categorical(): pass exactly one of probs or logits")
        if logits is not None:
            self.logits = logits - oarlock.logsumexp(logits, axis=-1, keepdim=True)
        else:
            self.logits = oarlock.log(probs / probs.sum(-1, keepdim=True))

    @property
    def probs(self):
        return oarlock.exp(self.logits)

    def sample(self, sample_shape=()):
        with oarlock.no_grad():
            flat = self.probs.reshape([-1, self.logits.shape[-1]])
            n = 1
            for d in sample_shape:
                n *= d
            draws = oarlock.multinomial(flat, n, replacement=True)   # [batch, n]
            draws = draws.transpose([1, 0]).reshape([*sample_shape, *self.logits.shape[:-1]])
            return draws

    def log_prob(self, value):
        value = value.astype("int64").unsqueeze(-1)
        logits = oarlock.broadcast_to(self.logits, [*value.shape[:-1], self.logits.shape[-1]])
        return oarlock.take_along_axis(logits, value, -1).squeeze(-1)

    def entropy(self):
        return -(self.probs * self.logits).sum(-1)


__getattr__ = missing_getattr("torch.distributions")
