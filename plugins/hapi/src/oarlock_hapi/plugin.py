"""Entry point of oarlock-hapi ("hapi"): export oarlock.Model, oarlock.callbacks and oarlock.metric."""

from oarlock import hookimpl

import oarlock_hapi


@hookimpl
def oarlock_register_api(api):
    oarlock_hapi.register_api(api)
