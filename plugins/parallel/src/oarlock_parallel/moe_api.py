"""The public names of the mixture-of-experts layer, registered by oarlock_parallel.plugin under the module
paths Paddle has them in: paddle.incubate.distributed.models.moe (and its .gate, .moe_layer, .grad_clip,
.utils modules) and paddle.distributed.utils.moe_utils (global_scatter, global_gather)."""

from __future__ import annotations

MOE = "oarlock.incubate.distributed.models.moe"
MOE_UTILS = "oarlock.distributed.utils.moe_utils"


def register(api) -> None:
    from oarlock_parallel import moe_clip, moe_exchange, moe_gates, moe_groups, moe_layer, moe_routing
    api.namespace(MOE, doc="Paddle's paddle.incubate.distributed.models.moe: MoELayer, its gates and the clip "
                           "for expert-parallel models.")
    names = {moe_gates: (f"{MOE}.gate", moe_gates.__all__), moe_layer: (f"{MOE}.moe_layer", moe_layer.__all__),
             moe_clip: (f"{MOE}.grad_clip", moe_clip.__all__)}
    for module, (namespace, exported) in names.items():
        api.namespace(namespace, doc=module.__doc__)
        for name in exported:
            api.export(namespace, name, getattr(module, name))
            api.export(MOE, name, getattr(module, name))
    api.export(MOE, "expert_parallel_groups", moe_groups.expert_parallel_groups)   # oarlock's own
    api.export(MOE, "ClipGradByGlobalNorm", moe_clip.ClipGradForMOEByGlobalNorm)   # Paddle's alias
    api.export(f"{MOE}.utils", "count_by_gate", moe_routing.count_by_gate)
    api.export(f"{MOE}.utils", "limit_by_capacity", moe_routing.limit_by_capacity)
    api.namespace(MOE_UTILS, doc=moe_exchange.__doc__)
    for name in moe_exchange.__all__:
        api.export(MOE_UTILS, name, getattr(moe_exchange, name))
