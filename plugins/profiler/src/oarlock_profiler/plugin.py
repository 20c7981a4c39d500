"""Entry point of oarlock-profiler ("profiler"): export oarlock.profiler, oarlock.summary and oarlock.flops."""

from oarlock import hookimpl

import oarlock_profiler


@hookimpl
def oarlock_register_api(api):
    oarlock_profiler.register_api(api)
