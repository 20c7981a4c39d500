"""`fleet.DistributedStrategy` as a plain Python object (Paddle's wraps a protobuf message).

Defaults and keys are Paddle 3.2's (distributed_strategy.proto). Each `*_configs` property returns a
fresh dict; assigning a dict merges it into the current settings after checking every key, and an
unknown key raises the AssertionError Paddle raises ("key:foo_degree not in hybrid_configs"), which is
also a ValueError here. Attributes are locked as in Paddle: setting an unknown one raises TypeError.
"""

from __future__ import annotations

import copy

from oarlock_parallel.strategies import registered


class ConfigKeyError(AssertionError, ValueError):
    """An unknown key in a `*_configs` dict (AssertionError as in Paddle; a ValueError too)."""


MP_CONFIGS = {"sync_param": True, "sync_grad": False, "sync_moment": False, "sync_mode": "broadcast",
              "mp_async_allreduce": False, "mp_skip_c_identity": False, "mp_fused_linear_param_grad_add": False,
              "need_broadcast_data": True, "recompute_allgather": False, "sp_async_reduce_scatter": False,
              "sync_param_name": ["embedding", "layer_norm", ".b_"]}
PP_CONFIGS = {"dp_comm_overlap": False, "delay_scale_loss": False, "enable_timer": False,
              "sharding_comm_overlap": False, "profiling": False, "release_gradients": False,
              "overlap_p2p_comm": False, "clear_every_step_cache": False, "use_batch_p2p_comm": True,
              "best_unbalanced_scheduler": False, "enable_offload_queue": False, "enable_dynamic_shape": False,
              "use_dualpipev": False, "forward_backward_overlap_scheduler": False, "sync_param": False,
              "sync_moment": False, "sync_mode": "broadcast"}
SHARDING_CONFIGS = {"tensor_fusion": False, "accumulate_steps": 1, "comm_overlap": False, "split_param": False,
                    "fuse_optimizer": True, "use_reduce_avg": True, "comm_buffer_size_MB": 256,
                    "release_gradients": False, "free_grads_in_comm": False, "enable_fuse_optimizer_states": False}
# sub-configs that hold only an NCCL configuration in Paddle (no effect on CPU)
NCCL_ONLY = ("dp_configs", "sep_configs", "dp_sep_configs", "pp_tp_configs", "ep_configs", "moe_sharding_configs",
             "default_comm_group_configs", "cp_configs", "cp_sharding_configs", "dp_cp_configs", "cp_mp_configs")
HYBRID_OTHER = {"enable_optimizer_timer": False, "split_norm_comm": False, "cp_sharding_degree": 1}
DEFAULT_ORDER = ["dp", "pp", "sharding", "sep", "cp", "mp"]

PIPELINE_CONFIGS = {"micro_batch_size": 1, "accumulate_steps": 1, "schedule_mode": "1F1B",
                    "p2p_cache_shape": True, "enable_partial_send_recv": True}
TENSOR_PARALLEL_CONFIGS = {"tensor_parallel_degree": 1, "tensor_init_seed": -1}
AMP_CONFIGS = {"init_loss_scaling": 32768.0, "incr_every_n_steps": 1000, "decr_every_n_nan_or_inf": 2,
               "incr_ratio": 2.0, "decr_ratio": 0.8, "use_dynamic_loss_scaling": True, "custom_white_list": [],
               "custom_black_list": [], "custom_black_varnames": [], "use_pure_fp16": False,
               "use_fp16_guard": True, "use_optimizer_fp16": False, "use_pure_bf16": False}


def _merge(current: dict, update, field: str) -> dict:
    """`current` updated by `update` after checking its type and every key (Paddle's check_configs_key)."""
    if not isinstance(update, dict):
        raise TypeError(f"DistributedStrategy.{field} must be set to a dict, got {type(update).__name__} {update!r}")
    for key in update:
        if key not in current:
            raise ConfigKeyError(f"key:{key} not in {field} (DistributedStrategy.{field} accepts: "
                                 f"{', '.join(sorted(current))})")
    merged = copy.deepcopy(current)
    merged.update(copy.deepcopy(update))
    return merged


def _hybrid_defaults() -> dict:
    degrees = {s.degree_key: s.default_degree for s in registered().values()}
    return {**degrees, **HYBRID_OTHER, "mp_configs": dict(MP_CONFIGS), "pp_configs": dict(PP_CONFIGS),
            "sharding_configs": dict(SHARDING_CONFIGS), **{name: {} for name in NCCL_ONLY}}


class DistributedStrategy:
    """Paddle's `fleet.DistributedStrategy`: the settings of a distributed run (dygraph hybrid parallel)."""

    __lock_attr = False

    def __init__(self):
        self._hybrid = _hybrid_defaults()
        self.hybrid_parallel_order = list(DEFAULT_ORDER)
        self._pipeline = dict(PIPELINE_CONFIGS)
        self._tensor_parallel = dict(TENSOR_PARALLEL_CONFIGS)
        self._amp = copy.deepcopy(AMP_CONFIGS)
        self.find_unused_parameters = False
        self.fuse_grad_size_in_MB = 32
        self.last_comm_group_size_MB = 1.0     # DataParallel's first (last-layers) bucket, as in Paddle
        self.tensor_parallel = False
        self.amp = False
        self.heter_ccl_mode = False
        self.__lock_attr = True

    def __setattr__(self, key, value):
        if self.__lock_attr and not hasattr(self, key):
            raise TypeError(f"{key} is not a attribute of {type(self).__name__}")
        object.__setattr__(self, key, value)

    @property
    def hybrid_configs(self) -> dict:
        """dp/mp/pp/sharding/sep/cp/ep/moe_sharding degrees (and those of registered strategies) and the
        sub-configs; the pseudo-key `order` sets `hybrid_parallel_order`."""
        return copy.deepcopy(self._hybrid)

    @hybrid_configs.setter
    def hybrid_configs(self, configs):
        if not isinstance(configs, dict):
            raise TypeError(f"DistributedStrategy.hybrid_configs must be set to a dict, got "
                            f"{type(configs).__name__} {configs!r}")
        configs = dict(configs)
        order = configs.pop("order", None)
        subs = {key: configs.pop(key) for key in list(configs) if key.endswith("_configs") and key in self._hybrid}
        merged = _merge(self._hybrid, configs, "hybrid_configs")
        for key, value in configs.items():
            if key.endswith("_degree") and (not isinstance(value, int) or isinstance(value, bool)):
                raise TypeError(f"DistributedStrategy.hybrid_configs: {key} must be an int, got "
                                f"{type(value).__name__} {value!r}")
        for key, value in subs.items():
            merged[key] = _merge(self._hybrid[key], value, key) if key not in NCCL_ONLY else copy.deepcopy(value)
        if order is not None:
            self._check_order(order)
            self.hybrid_parallel_order = list(order)
        self._hybrid = merged

    @staticmethod
    def _check_order(order):
        known = {s.order_key for s in registered().values()}
        if not isinstance(order, (list, tuple)) or not all(isinstance(o, str) for o in order):
            raise TypeError(f"DistributedStrategy.hybrid_configs: order must be a list of axis names such as "
                            f"{DEFAULT_ORDER}, got {order!r}")
        unknown = [o for o in order if o not in known]
        if unknown or len(set(order)) != len(order):
            raise ValueError(f"DistributedStrategy.hybrid_configs: order {list(order)} must name distinct "
                             f"parallel axes among {sorted(known)}" + (f"; unknown: {unknown}" if unknown else ""))

    def _section(name):   # noqa: N805 - builds the property of one plain `*_configs` section
        attr = "_" + name.removesuffix("_configs")

        def get(self):
            return copy.deepcopy(getattr(self, attr))

        def set_(self, configs):
            object.__setattr__(self, attr, _merge(getattr(self, attr), configs, name))

        return property(get, set_, doc=f"Paddle's DistributedStrategy.{name} (a dict; unknown keys rejected).")

    pipeline_configs = _section("pipeline_configs")
    tensor_parallel_configs = _section("tensor_parallel_configs")
    amp_configs = _section("amp_configs")
    del _section

    def __repr__(self):
        return (f"DistributedStrategy(hybrid_configs={self._hybrid!r}, order={self.hybrid_parallel_order!r}, "
                f"pipeline_configs={self._pipeline!r}, tensor_parallel_configs={self._tensor_parallel!r})")
