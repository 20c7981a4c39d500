"""Run by every rank of an MPI job: fleet.init, then each rank's HybridCommunicateGroup as seen from here.

argv: mode out.json. Mode "hybrid" (4 ranks): fleet.init with dp2 x mp2, then two more
HybridCommunicateGroups in order ['dp','pp','sharding','sep','mp'] (sharding2 x sep2 and pp2 x mp2);
for each, every getter and an all_reduce of (global rank + 1) * [1, 2, 3] over the model, data and
(when present) sep groups. Rank 0 gathers the reports through raw mpi4py and writes them as JSON.
Mode "mismatch": fleet.init with dp2 x mp2 on a world of another size; each rank reports its error.
The test (test_fleet_mpi.py) checks the reports against Paddle's CommunicateTopology and numpy.
"""

from __future__ import annotations

import json
import sys

from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
from oarlock.distributed import fleet
from oarlock_parallel import hybrid

ORDER5 = ["dp", "pp", "sharding", "sep", "mp"]


def summarize(hcg) -> dict:
    def ranks(getter, *args):
        try:
            return getter(*args).ranks
        except RuntimeError:   # Paddle's "sep not exist" and the like
            return None

    def reduced(group):
        if group is None:
            return None
        t = oarlock.to_tensor([1.0, 2.0, 3.0]) * float(hcg.get_global_rank() + 1)
        dist.all_reduce(t, group=group)
        return t.numpy().tolist()

    sep = hcg.get_sep_parallel_world_size() > 1
    return {
        "names": hcg.topology().get_hybrid_group_names(), "dims": [hcg.topology().get_dim(n) for n in
                                                                  hcg.topology().get_hybrid_group_names()],
        "global_rank": hcg.get_global_rank(), "mode": hcg.get_parallel_mode(),
        "data": [hcg.get_data_parallel_rank(), hcg.get_data_parallel_world_size(),
                 hcg.get_data_parallel_group().ranks, hcg.get_data_parallel_group_src_rank()],
        "model": [hcg.get_model_parallel_rank(), hcg.get_model_parallel_world_size(),
                  hcg.get_model_parallel_group().ranks, hcg.get_model_parallel_group_src_rank()],
        "sharding": [hcg.get_sharding_parallel_rank(), hcg.get_sharding_parallel_world_size(),
                     hcg.get_sharding_parallel_group().ranks, hcg.get_sharding_parallel_group_src_rank()],
        "sep": [hcg.get_sep_parallel_rank(), hcg.get_sep_parallel_world_size(),
                ranks(hcg.get_sep_parallel_group), hcg.get_sep_parallel_group_src_rank() if sep else None],
        "pipe": [hcg.get_stage_id(), hcg.get_pipe_parallel_world_size(), hcg.get_pipe_parallel_group().ranks,
                 hcg.is_first_stage, hcg.is_last_stage],
        "check": hcg.get_check_parallel_group().ranks,
        "sharding_check": ranks(hcg.get_check_parallel_group, True),
        "dp_sep": ranks(hcg.get_dp_sep_parallel_group), "pp_mp": ranks(hcg.get_pp_mp_parallel_group),
        "rank_from_stage": [hcg.get_rank_from_stage(s) for s in range(hcg.get_pipe_parallel_world_size())],
        "reduce_model": reduced(hcg.get_model_parallel_group()),
        "reduce_data": reduced(hcg.get_data_parallel_group()),
        "reduce_sep": reduced(hcg.get_sep_parallel_group()) if sep else None,
    }


def extra_hcg(configs: dict):
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {**configs, "order": ORDER5}
    names, dims, _ = hybrid.resolve(strategy.hybrid_configs, strategy.hybrid_parallel_order, dist.get_world_size())
    return fleet.HybridCommunicateGroup(fleet.CommunicateTopology(names, dims), strategy.hybrid_configs)


def main(mode: str, out: str) -> None:
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 2, "mp_degree": 2}
    if mode == "mismatch":
        try:
            fleet.init(is_collective=True, strategy=strategy)
            report = "no error"
        except ValueError as exc:
            report = f"ValueError: {exc}"
    else:
        fleet.init(is_collective=True, strategy=strategy)
        report = [summarize(fleet.get_hybrid_communicate_group()),
                  summarize(extra_hcg({"dp_degree": 1, "sharding_degree": 2, "sep_degree": 2})),
                  summarize(extra_hcg({"dp_degree": 1, "pp_degree": 2, "mp_degree": 2}))]
        report.append({"worker_index": fleet.worker_index(), "worker_num": fleet.worker_num(),
                       "is_first_worker": fleet.is_first_worker()})
    reports = MPI.COMM_WORLD.gather(report, root=0)
    if MPI.COMM_WORLD.rank == 0:
        with open(out, "w") as f:
            json.dump(reports, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
