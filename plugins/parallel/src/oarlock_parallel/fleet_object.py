"""`paddle.distributed.fleet.fleet`: Paddle's Fleet singleton, whose methods model code calls
(`fleet.fleet.get_hybrid_communicate_group()`, `fleet.fleet.worker_num()`); here a thin object over the
functions of oarlock_parallel.fleet, so module-level and object-level calls share one state."""

from __future__ import annotations

from oarlock_parallel import fleet as _fleet

__all__ = ["Fleet", "fleet"]


class Fleet:
    """The fleet singleton's collective-training methods (Paddle's Fleet): init, the hybrid group and
    topology, worker_index / worker_num / is_first_worker, distributed_model / distributed_optimizer."""

    def init(self, role_maker=None, is_collective=False, strategy=None, log_level="INFO"):
        _fleet.init(role_maker, is_collective, strategy, log_level)
        return self

    def get_hybrid_communicate_group(self):
        return _fleet.get_hybrid_communicate_group()

    def get_hybrid_parallel_topology(self):
        return _fleet.get_hybrid_parallel_topology()

    def worker_index(self):
        return _fleet.worker_index()

    def worker_num(self):
        return _fleet.worker_num()

    def is_first_worker(self):
        return _fleet.is_first_worker()

    def distributed_model(self, model):
        return _fleet.distributed_model(model)

    def distributed_optimizer(self, optimizer, strategy=None):
        return _fleet.distributed_optimizer(optimizer, strategy)


fleet = Fleet()
