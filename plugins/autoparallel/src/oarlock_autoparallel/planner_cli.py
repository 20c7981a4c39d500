"""planner_cli: placeholder until the planner lands; register(cli) adds `oarlock plan`."""


def register(cli) -> None:
    pass
