"""Public names of one part of oarlock-parallel, registered by oarlock_parallel.plugin (filled in as the part lands)."""


def register(api) -> None:
    pass
