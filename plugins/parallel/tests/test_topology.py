"""CommunicateTopology against Paddle 3.2's own (paddle.distributed.fleet.base.topology), for several
orders and dims: every get_comm_list, get_coord, get_rank, get_axis_list, get_fused_ranks and
get_rank_from_stage; plus the reference's documented layout for dims [2,2,1,1,1,2]."""

import itertools

import pytest

from oarlock_parallel.topology import CommunicateTopology

paddle_topology = pytest.importorskip("paddle.distributed.fleet.base.topology",
                                      reason="Paddle 3.2 is the oracle for the rank layout")

CASES = [
    (["data", "pipe", "sharding", "sep", "context", "model"], [2, 2, 1, 1, 1, 2]),
    (["data", "pipe", "sharding", "sep", "model"], [1, 2, 2, 1, 2]),
    (["model", "data", "pipe"], [3, 2, 2]),
    (["pipe", "moe_sharding", "expert", "data", "sharding", "sep", "context", "model"], [2, 1, 2, 1, 2, 1, 1, 2]),
    (["sharding", "model"], [4, 1]),
    (["data"], [5]),
]


@pytest.mark.parametrize("names,dims", CASES)
def test_matches_paddle(names, dims):
    ours, theirs = CommunicateTopology(names, dims), paddle_topology.CommunicateTopology(names, dims)
    assert ours.world_size() == theirs.world_size()
    for name in names:
        assert ours.get_comm_list(name) == theirs.get_comm_list(name), name
        assert ours.get_dim_size(name) == theirs.get_dim_size(name)
        for index in range(theirs.get_dim(name)):
            assert ours.get_axis_list(name, index) == theirs.get_axis_list(name, index)
    for rank in range(theirs.world_size()):
        coord = ours.get_coord(rank)
        assert tuple(coord) == tuple(theirs.get_coord(rank)) and coord._fields == theirs.get_coord(rank)._fields
        assert ours.get_rank(**coord._asdict()) == rank
        if "pipe" in names:
            for stage in range(theirs.get_dim("pipe")):
                assert ours.get_rank_from_stage(rank, pipe=stage) == theirs.get_rank_from_stage(rank, pipe=stage)
    for pair in itertools.combinations(names, 2):
        assert sorted(ours.get_fused_ranks(list(pair))) == sorted(theirs.get_fused_ranks(list(pair)))


def test_reference_layout_last_axis_contiguous():
    topo = CommunicateTopology(["data", "pipe", "sharding", "sep", "context", "model"], [2, 2, 1, 1, 1, 2])
    assert topo.get_comm_list("model") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert topo.get_comm_list("pipe") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert topo.get_comm_list("data") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_bad_input_names_the_method():
    topo = CommunicateTopology(["data", "model"], [2, 2])
    with pytest.raises(ValueError, match=r"get_comm_list\(\): axis 'pipe' is not one of"):
        topo.get_comm_list("pipe")
    with pytest.raises(ValueError, match=r"get_coord\(\): rank 4 is outside"):
        topo.get_coord(4)
    with pytest.raises(ValueError, match=r"CommunicateTopology\(\): dims must be ints >= 1"):
        CommunicateTopology(["data"], [0])
