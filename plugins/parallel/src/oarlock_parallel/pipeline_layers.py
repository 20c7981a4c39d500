"""Paddle 3.2's pipeline-parallel model description (fleet.meta_parallel LayerDesc, SharedLayerDesc,
LocalSharedLayerDesc, PipelineLayer).

Model code builds `PipelineLayer(layers=[LayerDesc(Cls, ...), SharedLayerDesc("embed", Emb, ...), ...],
num_stages=... or topology=..., loss_fn=...)`. The descriptions are split into num_stages x
num_virtual_pipeline_stages parts by `seg_method` (pipeline_segment: 'uniform', 'layer:<regex>' or explicit
boundaries); part v (global virtual stage v) belongs to pipeline stage v % num_stages as its local chunk
v // num_stages (Paddle's interleave layout). Each rank builds only the layers of its own parts, each under
Paddle's per-layer seed paddle.seed(1234 + layer index) (the generator state is restored afterwards), so a
layer's weights are the same whatever the split, and equal to those of the one-stage build.

A SharedLayerDesc key is one layer per rank, used at each of its places (forward_func(shared_layer, x) where
given); across stages the copies are kept equal by pipeline_shared.SharedWeights. With one stage
(num_stages=1, or a topology whose "pipe" size is 1) the layer runs every description in sequence as a
plain model. `forward(input, chunk_id=None)` runs this rank's layers (with virtual stages, those of chunk
`chunk_id`), `recompute_interval` layers at a time under recompute when asked; a tuple, list or dict input
reaches the first layer as it is, and the recomputed segments track the tensors inside it.
PipelineParallel (pipeline_parallel.py) runs the stages together."""

from __future__ import annotations

import functools

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
from oarlock_parallel.pipeline_segment import segment
from oarlock_parallel.pipeline_struct import flatten, unflatten
from oarlock_parallel.recompute import recompute, recompute_hybrid

__all__ = ["LayerDesc", "SharedLayerDesc", "LocalSharedLayerDesc", "PipelineLayer"]


class LayerDesc:
    """A layer to build later: layer_func(*inputs, **kwargs), layer_func a Layer subclass."""

    def __init__(self, layer_func, *inputs, **kwargs):
        if not (isinstance(layer_func, type) and issubclass(layer_func, nn.Layer)):
            raise TypeError(f"LayerDesc(): argument 'layer_func' must be a subclass of Layer; got {layer_func!r}")
        self.layer_func = layer_func
        self.inputs = inputs
        self.kwargs = kwargs

    def build_layer(self, **extra_kwargs):
        return self.layer_func(*self.inputs, **{**self.kwargs, **extra_kwargs})

    def __repr__(self):
        args = [repr(a) for a in self.inputs] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.layer_func.__name__}({', '.join(args)})"


class SharedLayerDesc(LayerDesc):
    """A layer shared by every description with the same `key` (tied embeddings); forward_func(layer, x), if
    given, replaces layer(x) at this use; shared_weight_attr names the shared parameters."""

    def __init__(self, key, layer_func, forward_func=None, shared_weight_attr="weight", *inputs, **kwargs):
        super().__init__(layer_func, *inputs, **kwargs)
        if isinstance(shared_weight_attr, str):
            shared_weight_attr = [shared_weight_attr]
        if not isinstance(shared_weight_attr, list) or not all(isinstance(a, str) for a in shared_weight_attr):
            raise TypeError(f"{type(self).__name__}(): argument 'shared_weight_attr' must be a str or a list of "
                            f"str; got {shared_weight_attr!r}")
        self.layer_name = key
        self.forward_func = forward_func
        self.shared_weight_attr = shared_weight_attr


class LocalSharedLayerDesc(SharedLayerDesc):
    """Paddle's dualpipev form of SharedLayerDesc: later uses build a new layer given the first one's shared
    parameters (as keyword arguments named by shared_weight_attr)."""


def _placement(num_stages, topology):
    """(number of stages, this rank's stage, topology or None) from PipelineLayer's arguments (Paddle's rules:
    without a topology, num_stages > 1 makes the default ["data", "pipe", "model"] one over the world)."""
    if num_stages is None and topology is None:
        raise ValueError("PipelineLayer(): should provide num_stages or topology")
    if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1):
        raise ValueError(f"PipelineLayer(): num_stages must be an int >= 1; got {num_stages!r}")
    if topology is None:
        if num_stages == 1:
            return 1, 0, None
        from oarlock_parallel.topology import CommunicateTopology
        world = dist.get_world_size()
        if world % num_stages:
            raise ValueError(f"PipelineLayer(): num_stages={num_stages} must divide the world size ({world})")
        topology = CommunicateTopology(["data", "pipe", "model"], [world // num_stages, num_stages, 1])
    stages = topology.get_dim_size("pipe") if "pipe" in topology.get_hybrid_group_names() else 1
    if num_stages is not None and stages != num_stages:
        raise ValueError(f"PipelineLayer(): num_stages={num_stages} differs from the topology's pipe size {stages}")
    stage = topology.get_coord(dist.get_rank()).pipe if stages > 1 else 0
    return stages, stage, topology


class PipelineLayerChunk(nn.Layer):
    """The layers of one model chunk (virtual stage) of this rank; PipelineLayer.forward(x, chunk_id) runs them."""

    def __init__(self):
        super().__init__()
        self.run_function = []

    def append(self, sublayer):
        if isinstance(sublayer, nn.Layer):
            self.add_sublayer(str(len(self.run_function)), sublayer)
        self.run_function.append(sublayer)

    def get_run_function(self):
        return self.run_function

    def forward(self, *args, **kwargs):
        raise PermissionError("PipelineLayerChunk.forward(): a model chunk cannot be called directly (recompute "
                              "lives in PipelineLayer.forward); call PipelineLayer.forward(input, chunk_id=...)")

    def __iter__(self):
        return iter(self.run_function)


class PipelineLayer(nn.Layer):
    """This rank's part of the layers of `layers` (descriptions or built layers), see the module docstring.

    loss_fn: a callable (output, label) -> loss, or a list of them (PipelineParallel's loss_fn_idx picks the one
    backward starts from); recompute_ctx: a dict, required when recompute_interval > 0: with an "mp_group" the
    segments run through recompute_hybrid (its "offload" and "partition" honoured), else through recompute (its
    "preserve_rng_state", default True); num_virtual_pipeline_stages: model chunks per stage (interleaved schedules;
    unlike Paddle, every seg_method is accepted, not only 'layer:'). use_cudagraph is accepted and does nothing;
    use_dualpipev is not implemented."""

    def __init__(self, layers, num_stages=None, topology=None, loss_fn=None, seg_method="uniform",
                 recompute_interval=0, recompute_ctx=None, num_virtual_pipeline_stages=None, use_cudagraph=False,
                 use_dualpipev=False):
        super().__init__()
        if use_dualpipev:
            raise NotImplementedError("PipelineLayer(): use_dualpipev=True (Paddle's DualPipeV schedule) is not "
                                      "implemented; accepted: False")
        chunks = 1 if num_virtual_pipeline_stages is None else num_virtual_pipeline_stages
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"PipelineLayer(): num_virtual_pipeline_stages must be None or an int >= 1; got "
                             f"{num_virtual_pipeline_stages!r}")
        if not isinstance(recompute_interval, int) or recompute_interval < 0:
            raise ValueError(f"PipelineLayer(): recompute_interval must be an int >= 0; got {recompute_interval!r}")
        if recompute_interval > 0 and recompute_ctx is None:
            raise ValueError("PipelineLayer(): recompute_ctx must be given when recompute_interval > 0")
        self._num_stages, self._stage_id, self._topo = _placement(num_stages, topology)
        if chunks > 1 and self._num_stages < 2:
            raise ValueError(f"PipelineLayer(): num_virtual_pipeline_stages={chunks} needs several pipeline stages; "
                             f"got {self._num_stages}")
        self._loss_fn = loss_fn if isinstance(loss_fn, list) else [loss_fn]
        self._recompute_interval = recompute_interval
        self.recompute_ctx = recompute_ctx
        self.use_cudagraph = use_cudagraph
        self.seg_method = seg_method
        self._base_seed = 1234
        self._num_virtual_pipeline_stages = chunks
        self._total_stages_with_virtual_stages = self._num_stages * chunks
        self._layers_desc = list(layers)
        self._num_layers = len(self._layers_desc)
        self.global_rank = dist.get_rank() if self._num_stages > 1 else 0
        self.segment_parts = segment(self._layers_desc, self._total_stages_with_virtual_stages, seg_method,
                                     self._num_stages)
        self._start_poss = [self.segment_parts[v] for v in self._my_virtual_stages()]
        self._end_poss = [self.segment_parts[v + 1] for v in self._my_virtual_stages()]
        self.shared_layers = nn.LayerDict()
        self._local_weights: dict = {}
        self._build()
        self.shared_weights = None
        if self._num_stages > 1:
            from oarlock_parallel.pipeline_shared import SharedWeights
            self.shared_weights = SharedWeights(self._layers_desc, self.get_stage_from_index, self.shared_layers,
                                                self._topo, self.global_rank)
            self.shared_weights.synchronize()

    def _my_virtual_stages(self) -> list:
        return [c * self._num_stages + self._stage_id for c in range(self._num_virtual_pipeline_stages)]

    # -- building -------------------------------------------------------------------------------------------
    def _build(self):
        from oarlock_parallel.rng import get_rng_state_tracker
        state, tracked = oarlock.get_rng_state(), get_rng_state_tracker().get_states_tracker()
        try:
            if self._num_virtual_pipeline_stages == 1:
                self._start_pos, self._end_pos = self._start_poss[0], self._end_poss[0]
                self.run_function = []
                self._build_range(self._start_pos, self._end_pos, self.run_function, self)
                self._model_chunks = None
            else:
                self._model_chunks = []
                for start, end in zip(self._start_poss, self._end_poss):
                    chunk = PipelineLayerChunk()
                    self._build_range(start, end, chunk.run_function, chunk)
                    self._model_chunks.append(chunk)
                    self.add_sublayer(str(start), chunk)
                self.run_function = self._model_chunks[0].run_function
        finally:   # as Paddle: building does not move the generators of the program
            oarlock.set_rng_state(state)
            get_rng_state_tracker().set_states_tracker(tracked)

    def _build_range(self, start, end, run_function, owner):
        for index in range(start, end):
            desc = self._layers_desc[index]
            oarlock.seed(self._base_seed + index)      # Paddle's per-layer seed: weights independent of the split
            if isinstance(desc, nn.Layer):
                owner.add_sublayer(str(index), desc)
                run_function.append(desc)
            elif isinstance(desc, LocalSharedLayerDesc):
                if desc.layer_name not in self._local_weights:
                    layer = desc.build_layer()
                    self._local_weights[desc.layer_name] = {a: getattr(layer, a) for a in desc.shared_weight_attr}
                else:
                    layer = desc.build_layer(**self._local_weights[desc.layer_name])
                owner.add_sublayer(str(index), layer)
                run_function.append(self._bound(layer, desc.forward_func))
            elif isinstance(desc, SharedLayerDesc):
                if desc.layer_name not in self.shared_layers:
                    self.shared_layers[desc.layer_name] = desc.build_layer()
                run_function.append(self._bound(self.shared_layers[desc.layer_name], desc.forward_func))
            elif isinstance(desc, LayerDesc):
                layer = desc.build_layer()
                owner.add_sublayer(str(index), layer)
                run_function.append(layer)
            elif callable(desc):
                run_function.append(desc)
            else:
                raise TypeError(f"PipelineLayer(): layers[{index}] is a {type(desc).__name__}; accepted: a Layer, a "
                                "LayerDesc / SharedLayerDesc or a callable")

    @staticmethod
    def _bound(layer, forward_func):
        return layer if forward_func is None else functools.partial(forward_func, layer)

    # -- Paddle's queries -------------------------------------------------------------------------------------
    def get_stage_from_index(self, layer_idx):
        if isinstance(layer_idx, bool) or not isinstance(layer_idx, int) or not 0 <= layer_idx < self._num_layers:
            raise ValueError(f"PipelineLayer.get_stage_from_index(): layer index {layer_idx!r} is out of range "
                             f"[0, {self._num_layers})")
        for v in range(self._total_stages_with_virtual_stages):
            if self.segment_parts[v] <= layer_idx < self.segment_parts[v + 1]:
                return v % self._num_stages
        raise AssertionError("unreachable: the segments cover every layer")

    def get_num_virtual_stages(self):
        return self._num_virtual_pipeline_stages

    def get_model_chunks(self):
        return self._model_chunks

    def allreduce_shared_weight_gradients(self):
        """Sum the gradients of layers shared across stages over the stages holding them (pipeline_shared)."""
        if self.shared_weights is not None:
            self.shared_weights.allreduce_gradients()

    # -- running ----------------------------------------------------------------------------------------------
    def forward_function(self, start, end, run_function=None):
        functions = (self.run_function if run_function is None else run_function)[start:end]

        def execute(*x):
            x = x[0] if len(x) == 1 else x
            for layer in functions:
                x = layer(x)
            return x
        return execute

    def _chunk(self, chunk_id):
        if chunk_id is None:
            if self._num_virtual_pipeline_stages > 1:
                raise ValueError(f"PipelineLayer.forward(): this stage holds {self._num_virtual_pipeline_stages} "
                                 "model chunks (virtual pipeline stages); pass chunk_id")
            return self.run_function
        if self._num_virtual_pipeline_stages == 1:
            raise ValueError(f"PipelineLayer.forward(): chunk_id={chunk_id!r} is only valid with virtual pipeline "
                             "stages; accepted: None")
        if isinstance(chunk_id, bool) or not isinstance(chunk_id, int) or \
                not 0 <= chunk_id < self._num_virtual_pipeline_stages:
            raise ValueError(f"PipelineLayer.forward(): chunk_id={chunk_id!r}; accepted: an int in "
                             f"[0, {self._num_virtual_pipeline_stages})")
        self.run_function = self._model_chunks[chunk_id].run_function    # as Paddle's update_run_function
        return self.run_function

    def forward(self, input, chunk_id=None):
        functions = self._chunk(chunk_id)
        n = len(functions)
        if self._recompute_interval == 0:
            return self.forward_function(0, n, functions)(input)
        for start in range(0, n, self._recompute_interval):
            end = min(start + self._recompute_interval, n)
            run = self.forward_function(start, end, functions)
            input = self._recomputed(run, input, self.recompute_ctx) \
                if self._need_recompute(functions[start:end], input) else run(input)
        return input

    @staticmethod
    def _recomputed(run, value, ctx):
        """run(value) under recompute: recompute_hybrid(ctx, ...) when ctx names an "mp_group" (as Paddle's
        PipelineLayer does: its "offload" and "partition" are honoured), else recompute(..., preserve_rng_state=
        ctx.get("preserve_rng_state", True)). Both track top-level tensors only, so the tensors of a tuple /
        list / dict input that need gradients are passed one by one (the others stay constants of the
        run), and the floating-point tensors of the output come back through it (the others, integer ids or
        masks, carry no gradient and are taken as the run gave them)."""
        tensors, spec = flatten(value, "PipelineLayer.forward()")
        tracked = [i for i, t in enumerate(tensors) if not t.stop_gradient]
        made = {}     # the last run's output: its spec, leaf count and non-float leaves by position

        def flat(*needing):
            leaves = list(tensors)
            for i, t in zip(tracked, needing):
                leaves[i] = t
            out, made["spec"] = flatten(run(unflatten(spec, leaves)), "PipelineLayer.forward()")
            made["count"] = len(out)
            made["constants"] = {i: t for i, t in enumerate(out) if not t.dtype.is_floating_point}
            floats = [t for t in out if t.dtype.is_floating_point]
            return floats[0] if len(floats) == 1 else tuple(floats)

        inputs = [tensors[i] for i in tracked]
        if ctx.get("mp_group") is not None:
            result = recompute_hybrid(ctx, flat, *inputs)
        else:
            result = recompute(flat, *inputs, preserve_rng_state=ctx.get("preserve_rng_state", True))
        floats = iter([result] if isinstance(result, oarlock.Tensor) else result)
        constants = made["constants"]
        return unflatten(made["spec"], [constants[i] if i in constants else next(floats)
                                        for i in range(made["count"])])

    @staticmethod
    def _need_recompute(funcs, inputs):
        tensors = flatten(inputs, "PipelineLayer.forward()")[0]
        if not any(not t.stop_gradient for t in tensors):
            return False
        return any(len(list(f.parameters())) > 0 for f in funcs if isinstance(f, nn.Layer))
