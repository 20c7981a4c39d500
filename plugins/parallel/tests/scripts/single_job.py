"""One process (an MPI singleton): fleet degrades to the plain model and optimizer, and a third-party
package adds a parallel strategy through the hook. Exits non-zero, with the failed assertion, on error;
test_fleet_single.py runs it in a fresh interpreter so the registered toy strategy stays out of pytest."""

from __future__ import annotations

import oarlock
from oarlock import hookimpl
from oarlock.distributed import fleet
from oarlock.plugins import register_plugin
from oarlock_parallel import ParallelStrategy


class ToyParallelPlugin:
    """A third-party package's strategy: degree key "toy_degree", order key "toy", topology axis "toy"."""

    @hookimpl
    def oarlock_register_parallel_strategies(self, strategies):
        strategies.register(ParallelStrategy("toy", "a toy strategy from a third-party package",
                                             "toy_degree", "toy", "toy",
                                             wrap_model=lambda s, model, hcg, user: ("toy-wrapped", model)))


def main():
    model = oarlock.nn.Linear(3, 2)
    opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    try:
        fleet.init(True)
        raise AssertionError("fleet.init(True) did not raise")
    except ValueError as exc:
        assert "role_maker" in str(exc), exc
    fleet.init(is_collective=True)
    assert fleet.distributed_model(model) is model
    assert fleet.distributed_optimizer(opt) is opt
    hcg = fleet.get_hybrid_communicate_group()
    assert hcg.get_parallel_mode() is None and hcg.get_data_parallel_world_size() == 1
    assert (fleet.worker_index(), fleet.worker_num(), fleet.is_first_worker()) == (0, 1, True)

    register_plugin(ToyParallelPlugin(), "toy-parallel")
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"toy_degree": 1, "order": ["dp", "pp", "sharding", "sep", "mp", "toy"]}
    assert strategy.hybrid_configs["toy_degree"] == 1
    from oarlock_parallel import hybrid
    names, dims, degrees = hybrid.resolve(strategy.hybrid_configs, strategy.hybrid_parallel_order, 1)
    assert names[-1] == "toy" and dims == [1] * 6 and degrees["toy"] == 1, (names, dims, degrees)
    hcg = fleet.HybridCommunicateGroup(fleet.CommunicateTopology(names, dims))
    assert hcg.get_axis_group("toy").ranks == [0]
    try:
        strategy.hybrid_configs = {"foo_degree": 2}
        raise AssertionError("foo_degree accepted")
    except AssertionError as exc:
        assert "key:foo_degree not in hybrid_configs" in str(exc), exc
    from oarlock.plugins import default_manager
    rows = {row.name: row for row in default_manager().info()}
    assert rows["toy-parallel"].strategies == ["toy: a toy strategy from a third-party package"], rows["toy-parallel"]
    assert any(s.startswith("data: ") for s in rows["parallel"].strategies), rows["parallel"]
    print("single-process fleet OK")


if __name__ == "__main__":
    main()
