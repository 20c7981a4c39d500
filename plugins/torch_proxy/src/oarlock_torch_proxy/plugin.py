"""Entry point of oarlock-torch-proxy ("torch_proxy"): exports the proxy's switches into oarlock.compat."""

from oarlock import hookimpl

from oarlock_torch_proxy import hook

NAMES = ("enable_torch_proxy", "disable_torch_proxy", "torch_proxy", "torch_proxy_enabled", "torch_proxy_scope")


@hookimpl
def oarlock_register_api(api):
    for name in NAMES:
        api.export("oarlock.compat", name, getattr(hook, name))
