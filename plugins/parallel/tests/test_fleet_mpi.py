"""fleet in real MPI jobs (scripts/fleet_job.py).

4 ranks under `oarlock launch`: fleet.init with dp2 x mp2, and HybridCommunicateGroups in order
['dp','pp','sharding','sep','mp'] (sharding2 x sep2, pp2 x mp2). Every rank's group memberships, ranks in
groups, src ranks and stages are checked against Paddle's CommunicateTopology (the oracle), and an
all_reduce of (rank + 1) * [1, 2, 3] over the model, data and sep groups against numpy.
3 ranks under mpiexec with dp2 x mp2 (product 4): every rank gets the same clear ValueError, no hang.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from parallel_jobs import job_report, launch_command

pytest.importorskip("mpi4py")
paddle_topology = pytest.importorskip("paddle.distributed.fleet.base.topology",
                                      reason="Paddle 3.2 is the oracle for the rank layout")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet") / "report.json"
    return job_report(launch_command("fleet_job", "hybrid", out, ranks=4), out, "4-rank fleet job", timeout=240)


def _mine(comm_list, rank):
    return next(group for group in comm_list if rank in group)


@pytest.mark.parametrize("which,names,dims,mode", [
    (0, ["data", "pipe", "sharding", "sep", "context", "model"], [2, 1, 1, 1, 1, 2], 1),   # dp2 x mp2
    (1, ["data", "pipe", "sharding", "sep", "model"], [1, 1, 2, 2, 1], 4),                 # sharding2 x sep2
    (2, ["data", "pipe", "sharding", "sep", "model"], [1, 2, 1, 1, 2], 2),                 # pp2 x mp2
])
def test_groups_match_paddle_topology(reports, which, names, dims, mode):
    topo = paddle_topology.CommunicateTopology(names, dims)
    base = np.array([1.0, 2.0, 3.0])
    for rank, report in enumerate(reports):
        got = report[which]
        coord = topo.get_coord(rank)._asdict()
        assert (got["names"], got["dims"], got["global_rank"], got["mode"]) == (names, dims, rank, mode)
        for key, axis in (("data", "data"), ("model", "model"), ("sharding", "sharding")):
            group = _mine(topo.get_comm_list(axis), rank)
            assert got[key] == [coord[axis], topo.get_dim(axis), group, group[0]], (rank, key)
        pipe = _mine(topo.get_comm_list("pipe"), rank)
        assert got["pipe"] == [coord["pipe"], topo.get_dim("pipe"), pipe, coord["pipe"] == 0,
                               coord["pipe"] == topo.get_dim("pipe") - 1]
        assert got["rank_from_stage"] == pipe
        assert got["check"] == topo.get_axis_list("data", coord["data"])
        sep = topo.get_dim("sep") > 1
        sep_group = _mine(topo.get_comm_list("sep"), rank) if sep else None
        assert got["sep"] == [coord["sep"], topo.get_dim("sep"), sep_group, sep_group[0] if sep else None]
        if sep:
            assert got["dp_sep"] == _mine(topo.get_fused_ranks(["data", "sep"]), rank)
            assert got["pp_mp"] == _mine(topo.get_fused_ranks(["pipe", "model"]), rank)
        if topo.get_dim("sharding") > 1:
            assert got["sharding_check"] == topo.get_axis_list("sharding", coord["sharding"])
        for key, axis in (("reduce_model", "model"), ("reduce_data", "data"), ("reduce_sep", "sep")):
            if got[key] is not None:
                expected = sum((r + 1) * base for r in _mine(topo.get_comm_list(axis), rank))
                np.testing.assert_allclose(got[key], expected, rtol=0, atol=0, err_msg=f"{key} on rank {rank}")


def test_reference_layout_and_workers(reports):
    first = [report[0] for report in reports]
    assert [r["model"][2] for r in first] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["data"][2] for r in first] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [report[3] for report in reports] == [
        {"worker_index": r, "worker_num": 4, "is_first_worker": r == 0} for r in range(4)]


def test_degrees_not_matching_the_world_fail_on_every_rank(tmp_path):
    out = tmp_path / "report.json"
    mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    errors = job_report([mpiexec, "-n", "3", *launch_command("fleet_job", "mismatch", out, ranks=None)], out,
                        "3-rank fleet job", timeout=240)
    assert len(errors) == 3
    for error in errors:
        assert error.startswith("ValueError: fleet.init(): the hybrid degrees"), error
        assert "multiply to 4, but the job has 3 rank(s)" in error and "dp_degree=2" in error, error
