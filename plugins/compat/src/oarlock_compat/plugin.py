"""Entry point of oarlock-compat ("compat"): export the Paddle alias switches into oarlock.compat."""

from oarlock import hookimpl

from oarlock_compat import alias


@hookimpl
def oarlock_register_api(api):
    api.namespace("oarlock.compat", doc="Run code written for other frameworks (PaddlePaddle) on oarlock unchanged.")
    for name in ("enable_paddle_alias", "disable_paddle_alias", "paddle_alias", "paddle_alias_enabled"):
        api.export("oarlock.compat", name, getattr(alias, name))
