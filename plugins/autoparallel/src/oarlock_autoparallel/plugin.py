"""Entry point of oarlock-autoparallel: exports the auto-parallel API into oarlock.distributed (and the Paddle
module paths model code imports it from). Nothing heavy is imported here."""

from oarlock import hookimpl


@hookimpl
def oarlock_register_api(api):
    from oarlock_autoparallel import dtensor_api, planner_api, spmd_api
    dtensor_api.register(api)     # ProcessMesh, placements, shard_tensor, reshard, Tensor.is_dist/placements/...
    spmd_api.register(api)        # shard_layer, shard_optimizer, parallelize, local_map, ...
    planner_api.register(api)     # the planner's Python API (and its `oarlock plan` command elsewhere)


@hookimpl
def oarlock_register_commands(cli):
    from oarlock_autoparallel import planner_cli
    planner_cli.register(cli)     # `oarlock plan`
