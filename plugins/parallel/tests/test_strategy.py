"""fleet.DistributedStrategy: Paddle 3.2's keys and defaults (read from Paddle's own
distributed_strategy.proto descriptors; Paddle's DistributedStrategy object itself needs protobuf<6),
merging, the `order` pseudo-key, Paddle's errors for unknown keys and attributes, deep copies; and the
degree resolution of fleet.init (clamping, dp_degree=-1)."""

import pytest

from oarlock_parallel import hybrid
from oarlock_parallel.config import DistributedStrategy


def _proto_defaults(message: str) -> dict:
    pb = pytest.importorskip("paddle.distributed.fleet.proto.distributed_strategy_pb2",
                             reason="Paddle 3.2's strategy proto is the oracle for the defaults")
    # scalar and repeated fields; sub-messages (11) are compared separately
    return {f.name: f.default_value for f in getattr(pb, message).DESCRIPTOR.fields if f.type != 11}


def _same(ours: dict, theirs: dict, skip=()):
    for key, value in theirs.items():
        assert key in ours, key
        expected = list(value) if isinstance(value, list) else value
        assert ours[key] == pytest.approx(expected) if isinstance(value, float) else ours[key] == expected, key
    extra = set(ours) - set(theirs) - set(skip)
    assert not extra, extra


def test_defaults_match_paddle():
    s = DistributedStrategy()
    hybrid_configs = s.hybrid_configs
    subs = {k for k in hybrid_configs if k.endswith("_configs")}
    _same(hybrid_configs, _proto_defaults("HybridConfig"), skip=subs)
    _same(hybrid_configs["mp_configs"], _proto_defaults("MpConfig"), skip={"sync_param_name"})
    _same(hybrid_configs["pp_configs"], _proto_defaults("PpConfig"))
    _same(hybrid_configs["sharding_configs"], _proto_defaults("DygraphShardingConfig"))
    _same(s.pipeline_configs, _proto_defaults("PipelineConfig"))
    _same(s.tensor_parallel_configs, _proto_defaults("TensorParallelConfig"))
    _same(s.amp_configs, _proto_defaults("AMPConfig"))
    strategy_fields = _proto_defaults("DistributedStrategy")
    assert (s.find_unused_parameters, s.fuse_grad_size_in_MB) == (strategy_fields["find_unused_parameters"],
                                                                   strategy_fields["fuse_grad_size_in_MB"])
    assert s.hybrid_parallel_order == ["dp", "pp", "sharding", "sep", "cp", "mp"]
    assert set(hybrid_configs) - subs >= {"dp_degree", "mp_degree", "pp_degree", "sharding_degree", "sep_degree",
                                          "ep_degree", "moe_sharding_degree", "cp_degree", "cp_sharding_degree"}


def test_setting_merges_and_order_is_a_pseudo_key():
    s = DistributedStrategy()
    s.hybrid_configs = {"dp_degree": 2, "mp_configs": {"sync_grad": True}, "order": ["mp", "dp", "pp"]}
    s.hybrid_configs = {"mp_degree": 2}
    h = s.hybrid_configs
    assert (h["dp_degree"], h["mp_degree"], h["mp_configs"]["sync_grad"], h["mp_configs"]["sync_param"]) == \
        (2, 2, True, True)
    assert "order" not in h and s.hybrid_parallel_order == ["mp", "dp", "pp"]
    h["dp_degree"] = 8                      # a fresh dict: the strategy does not change
    assert s.hybrid_configs["dp_degree"] == 2
    s.pipeline_configs = {"micro_batch_size": 4}
    assert s.pipeline_configs == {**s.pipeline_configs, "micro_batch_size": 4, "accumulate_steps": 1}


def test_errors_as_paddle():
    s = DistributedStrategy()
    with pytest.raises(AssertionError, match="key:foo_degree not in hybrid_configs"):
        s.hybrid_configs = {"foo_degree": 2}
    with pytest.raises(ValueError, match="key:bogus not in mp_configs"):
        s.hybrid_configs = {"mp_configs": {"bogus": 1}}
    with pytest.raises(AssertionError, match="key:micro_batch not in pipeline_configs"):
        s.pipeline_configs = {"micro_batch": 2}
    with pytest.raises(TypeError, match="foo is not a attribute of DistributedStrategy"):
        s.foo = 1
    with pytest.raises(TypeError, match="mp_degree must be an int, got str"):
        s.hybrid_configs = {"mp_degree": "2"}
    with pytest.raises(ValueError, match=r"order .* unknown: \['xx'\]"):
        s.hybrid_configs = {"order": ["dp", "xx"]}
    assert s.hybrid_configs["mp_degree"] == 1      # a refused update changes nothing


@pytest.mark.parametrize("configs,world,dims", [
    ({}, 4, [4, 1, 1, 1, 1, 1]),                                        # dp=-1: the whole world
    ({"mp_degree": 2}, 4, [2, 1, 1, 1, 1, 2]),
    ({"mp_degree": 0, "pp_degree": 0, "dp_degree": 0}, 1, [1] * 6),     # below 1: clamped
    ({"sharding_degree": 2}, 4, [4, 1, 2, 1, 1, 1]),                   # Paddle ignores sharding for dp=-1
    ({"pp_degree": 2, "mp_degree": 2}, 8, [2, 2, 1, 1, 1, 2]),
])
def test_resolution_follows_paddle(configs, world, dims):
    s = DistributedStrategy()
    s.hybrid_configs = configs
    names, got, _ = hybrid.resolve(s.hybrid_configs, s.hybrid_parallel_order, world)
    assert names == ["data", "pipe", "sharding", "sep", "context", "model"] and got == dims


def test_resolution_errors():
    s = DistributedStrategy()
    s.hybrid_configs = {"ep_degree": 2}
    with pytest.raises(ValueError, match=r"ep_degree=2 but hybrid_configs order .* leaves its axis out"):
        hybrid.resolve(s.hybrid_configs, s.hybrid_parallel_order, 2)
    s.hybrid_configs = {"mp_degree": -1}
    with pytest.raises(ValueError, match=r"hybrid_configs\['mp_degree'\] must be >= 0, got -1"):
        hybrid.resolve(s.hybrid_configs, s.hybrid_parallel_order, 2)
