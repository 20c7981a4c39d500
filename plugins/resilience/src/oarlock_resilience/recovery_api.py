"""recovery_api: exports checkpoint disaster recovery into oarlock.distributed.resilience."""

_NAMES = ("save", "resume", "flush_replicas", "remove_replicas", "last_restore")


def register(api) -> None:
    from oarlock_resilience import recovery
    for name in _NAMES:
        api.export("oarlock.distributed.resilience", name, getattr(recovery, name))
