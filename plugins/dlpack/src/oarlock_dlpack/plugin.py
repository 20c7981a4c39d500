"""Entry point of oarlock-dlpack: exports oarlock.utils.dlpack (and oarlock.to_dlpack, as Paddle has it)."""

from __future__ import annotations

from oarlock import hookimpl

from oarlock_dlpack import exchange

NAMESPACE = "oarlock.utils.dlpack"


@hookimpl
def oarlock_register_api(api):
    api.namespace(NAMESPACE, "DLPack: zero-copy exchange with numpy, PyTorch, CuPy; every dtype, bfloat16 included.")
    for name in ("to_dlpack", "from_dlpack", "DLDeviceType"):
        api.export(NAMESPACE, name, getattr(exchange, name))
    api.export("oarlock", "to_dlpack", exchange.to_dlpack)
