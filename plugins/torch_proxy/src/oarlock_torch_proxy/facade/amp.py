"""torch.amp (and torch.cuda.amp / torch.cpu.amp): autocast and GradScaler.

`autocast("cuda", ...)` leaves tensors on other devices alone in torch, and the façade's tensors are on the CPU
here, so it is a no-op there; `enabled=False` is a no-op everywhere. CPU autocast to a lower precision is a
precision change the façade does not reproduce op for op, so asking for it is reported, not ignored."""

from __future__ import annotations

import functools

from oarlock_torch_proxy.missing import missing_getattr, not_implemented


class autocast:
    def __init__(self, device_type="cuda", dtype=None, enabled=True, cache_enabled=None):
        self.device_type, self.dtype, self.enabled = str(device_type), dtype, enabled

    def _check(self):
        if self.enabled and self.device_type == "cpu":
            not_implemented(f"torch.autocast(device_type={self.device_type!r}, enabled=True)")

    def __enter__(self):
        self._check()
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper


def custom_fwd(fn=None, *, device_type="cuda", cast_inputs=None):
    if fn is None:
        return lambda f: f
    return fn


def custom_bwd(fn=None, *, device_type="cuda"):
    if fn is None:
        return lambda f: f
    return fn


def is_autocast_available(device_type) -> bool:
    return False


class GradScaler:
    """torch.amp.GradScaler with nothing to scale (no float16 autocast here): scale() and unscale_() are
    identities and step() steps; `enabled` is reported as False, as torch does when CUDA is missing."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._enabled = False

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass

    def is_enabled(self):
        return False

    def get_scale(self):
        return 1.0

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


__getattr__ = missing_getattr("torch.amp")
