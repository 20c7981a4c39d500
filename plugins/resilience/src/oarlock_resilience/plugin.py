"""Entry point of oarlock-resilience: exports oarlock.distributed.resilience. Nothing heavy is imported here."""

from oarlock import hookimpl


@hookimpl
def oarlock_register_api(api):
    from oarlock_resilience import recovery_api, sdc_api
    sdc_api.register(api)          # SDCMonitor, SilentDataCorruptionError, fault injection for tests
    recovery_api.register(api)     # resume, checkpoint replicas on buddy ranks
