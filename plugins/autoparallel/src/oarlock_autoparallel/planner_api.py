"""planner_api: placeholder until its part lands; register(api) exports its names."""


def register(api) -> None:
    pass
