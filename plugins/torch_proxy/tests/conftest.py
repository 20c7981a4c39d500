"""Shared helpers of the torch-proxy tests: load a library twice in one process (once over the real torch,
once through the proxy), copy weights across, compare with a relative error, and write a throw-away package
whose modules run as torch code (to call Tensor methods the way a library does)."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest


class Pair:
    """A library imported over real torch (`real`) and through the proxy (`proxy`); `sub_real[name]` and
    `sub_proxy[name]` are the submodules asked for."""

    def __init__(self, real, proxy, sub_real, sub_proxy):
        self.real, self.proxy, self.sub_real, self.sub_proxy = real, proxy, sub_real, sub_proxy


class ProxyTools:
    def __init__(self, torch):
        import oarlock_torch_proxy.facade as facade
        self.torch, self.ft = torch, facade

    def load_both(self, lib: str, scope, also=()) -> Pair:
        real = importlib.import_module(lib)
        sub_real = {name: importlib.import_module(name) for name in also}
        from oarlock.compat import torch_proxy
        with torch_proxy(scope=scope):
            proxied = importlib.import_module(lib)
            sub_proxy = {name: importlib.import_module(name) for name in also}
        assert proxied is not real and sys.modules[lib] is real
        return Pair(real, proxied, sub_real, sub_proxy)

    def to_ft(self, t, requires_grad=False):
        return self.ft.tensor(t.detach().numpy(), requires_grad=requires_grad)

    def copy_weights(self, src, dst) -> None:
        """Torch module `src`'s state into façade module `dst`, by torch's own state-dict names."""
        result = dst.load_state_dict({k: self.to_ft(v) for k, v in src.state_dict().items()})
        assert not result.missing_keys and not result.unexpected_keys

    @staticmethod
    def rel(a, b) -> float:
        """max |a - b| / max |a| (a: the torch oracle)."""
        a = a.detach().numpy() if hasattr(a, "detach") and not hasattr(a, "place") else np.asarray(a.numpy())
        b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        assert a.shape == b.shape, f"shapes differ: torch {a.shape}, proxy {b.shape}"
        return float(np.abs(a - b).max(initial=0.0) / max(np.abs(a).max(initial=0.0), 1e-30))


@pytest.fixture(scope="session")
def proxy_tools(torch):
    return ProxyTools(torch)


@pytest.fixture(scope="module")
def torch_code(tmp_path_factory):
    """A package `proxytorchcode` imported through the proxy: its `call(x, name, *args)` runs x.name(*args)
    from torch code, and `ns` is its module namespace (where `torch` is the façade)."""
    from oarlock.compat import torch_proxy
    root = tmp_path_factory.mktemp("torchcode")
    (root / "proxytorchcode").mkdir()
    (root / "proxytorchcode" / "__init__.py").write_text(textwrap.dedent("""
        import torch

        def call(x, name, *args, **kwargs):
            return getattr(x, name)(*args, **kwargs)

        def attr(x, name):
            return getattr(x, name)
    """))
    sys.path.insert(0, str(root))
    try:
        with torch_proxy(scope={"proxytorchcode"}):
            module = importlib.import_module("proxytorchcode")
    finally:
        sys.path.remove(str(root))
    return module
