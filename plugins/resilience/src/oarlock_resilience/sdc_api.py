"""sdc_api: exports the silent-data-corruption part of oarlock.distributed.resilience: SDCMonitor,
SilentDataCorruptionError and inject_fault (fault injection for tests)."""


def register(api) -> None:
    from oarlock_resilience import sdc_errors, sdc_inject, sdc_monitor
    api.export("oarlock.distributed.resilience", "SDCMonitor", sdc_monitor.SDCMonitor)
    api.export("oarlock.distributed.resilience", "SilentDataCorruptionError", sdc_errors.SilentDataCorruptionError)
    api.export("oarlock.distributed.resilience", "inject_fault", sdc_inject.inject_fault)
