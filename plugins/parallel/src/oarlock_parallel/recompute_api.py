"""The recompute names, registered by oarlock_parallel.plugin under Paddle's paths: fleet.utils.recompute (the
function), the module fleet.recompute (recompute_sequential) and its submodule fleet.recompute.recompute
(everything of oarlock_parallel.recompute, which PaddleFormers imports from there); and oarlock's own
fleet.utils.offload (activation offload and the memory planner: offload.py, offload_planner.py).

Paddle's fleet.recompute package also binds the function `recompute` over its submodule's attribute; here
`fleet.recompute.recompute` is the submodule (a namespace cannot also be a name), so `from
paddle.distributed.fleet.recompute.recompute import recompute` and `fleet.utils.recompute` are the ways in."""

from __future__ import annotations

PACKAGE = "oarlock.distributed.fleet.recompute"
MODULE = PACKAGE + ".recompute"
UTILS = "oarlock.distributed.fleet.utils"
OFFLOAD = UTILS + ".offload"


def register(api) -> None:
    from oarlock_parallel import recompute
    api.namespace(PACKAGE, doc=recompute.__doc__)
    api.namespace(MODULE, doc=recompute.__doc__)
    for name in recompute.__all__:
        api.export(MODULE, name, getattr(recompute, name))
    for name in ("recompute_sequential", "recompute_hybrid", "custom_state_manager"):
        api.export(PACKAGE, name, getattr(recompute, name))
    api.export(UTILS, "recompute", recompute.recompute)
    from oarlock_parallel import offload, offload_planner
    api.namespace(OFFLOAD, doc=offload.__doc__ + "\n" + offload_planner.__doc__)
    for module in (offload, offload_planner):
        for name in module.__all__:
            api.export(OFFLOAD, name, getattr(module, name))
