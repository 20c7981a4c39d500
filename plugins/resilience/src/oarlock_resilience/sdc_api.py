"""sdc_api: exports its part of oarlock.distributed.resilience (filled in by its module owner)."""


def register(api) -> None:
    pass
