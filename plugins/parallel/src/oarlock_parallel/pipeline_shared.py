"""Layers shared across pipeline stages (SharedLayerDesc with one key used on several stages, e.g. a tied
embedding and LM head on the first and last stage): Paddle's PipelineLayer._construct_shared_comm,
_synchronize_shared_weights and allreduce_shared_weight_gradients.

Each stage that uses a key builds its own copy of the layer. For every key used on more than one stage, every
pipeline line gets one group of the ranks holding it (every rank makes every group, in the same order). The
copies start equal by a broadcast from the first stage holding the key (`synchronize`), and after backward
the shared parameters' gradients are summed over the group (`allreduce_gradients`), so each copy takes the
same optimizer step as the one layer of a single process. As in Paddle, the parameter of the first holder has
`is_firstly_shared = True` and the others False: global-norm clipping counts only the first copy.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist


class SharedWeights:
    """The shared-layer groups of one PipelineLayer.

    descs: its layer descriptions; stage_of(index): the pipeline stage of description `index`;
    shared_layers: this rank's LayerDict of built shared layers; topology: the CommunicateTopology (its
    "pipe" axis); rank: this process's global rank."""

    def __init__(self, descs, stage_of, shared_layers, topology, rank: int):
        from oarlock_parallel.pipeline_layers import LocalSharedLayerDesc, SharedLayerDesc
        stages: dict = {}     # key -> sorted stages using it (insertion order of first use: the same everywhere)
        attrs: dict = {}      # key -> the first description's shared_weight_attr
        for index, desc in enumerate(descs):
            if isinstance(desc, SharedLayerDesc) and not isinstance(desc, LocalSharedLayerDesc):
                stages.setdefault(desc.layer_name, set()).add(stage_of(index))
                first = attrs.setdefault(desc.layer_name, list(desc.shared_weight_attr))
                if not set(desc.shared_weight_attr) <= set(first):
                    raise ValueError(f"PipelineLayer(): SharedLayerDesc {desc.layer_name!r} at layer {index} shares "
                                     f"{desc.shared_weight_attr}, which the first use's {first} does not include")
        self.comms = []       # (key, group, ranks, attrs) for the groups holding this rank
        lines = topology.get_comm_list("pipe") if "pipe" in topology.get_hybrid_group_names() else []
        for key, used in stages.items():
            if len(used) < 2:
                continue
            for line in lines:
                ranks = [line[s] for s in sorted(used)]
                group = dist.new_group(ranks)
                if rank in ranks:
                    self.comms.append((key, group, ranks, attrs[key]))
        for key, layer in shared_layers.items():
            for name in attrs.get(key, []):
                self._param(layer, key, name).is_firstly_shared = True
        for key, _, ranks, names in self.comms:
            for name in names:
                self._param(shared_layers[key], key, name).is_firstly_shared = rank == ranks[0]
        self._layers = shared_layers

    @staticmethod
    def _param(layer, key: str, name: str):
        param = getattr(layer, name, None)
        if not isinstance(param, oarlock.Tensor):
            raise ValueError(f"PipelineLayer(): the shared layer {key!r} ({type(layer).__name__}) has no parameter "
                             f"{name!r} (shared_weight_attr)")
        return param

    def synchronize(self) -> None:
        """Broadcast every shared parameter from the first stage that holds it."""
        with oarlock.no_grad():
            for key, group, ranks, names in self.comms:
                for name in names:
                    dist.broadcast(self._param(self._layers[key], key, name), src=ranks[0], group=group)

    def allreduce_gradients(self) -> None:
        """Sum the shared parameters' gradients over the stages holding them (a missing gradient counts as
        zeros, as in Paddle)."""
        with oarlock.no_grad():
            for key, group, _, names in self.comms:
                for name in names:
                    param = self._param(self._layers[key], key, name)
                    if param.grad is None:
                        param.grad = oarlock.zeros_like(param)
                    dist.all_reduce(param.grad, group=group)
