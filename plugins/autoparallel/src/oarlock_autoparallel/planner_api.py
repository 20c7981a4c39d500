"""planner_api: exports the planner's Python API into oarlock.distributed: plan (planner.plan), PlanResult and
ModelSpec."""


def register(api) -> None:
    from oarlock_autoparallel import planner, planner_model
    api.export("oarlock.distributed", "plan", planner.plan)
    api.export("oarlock.distributed", "PlanResult", planner.PlanResult)
    api.export("oarlock.distributed", "ModelSpec", planner_model.ModelSpec)
