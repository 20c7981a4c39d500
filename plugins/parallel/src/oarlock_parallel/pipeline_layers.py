"""Paddle 3.2's pipeline-parallel model description (fleet.meta_parallel LayerDesc, SharedLayerDesc,
LocalSharedLayerDesc, PipelineLayer), for one pipeline stage.

Model code builds `PipelineLayer(layers=[LayerDesc(Cls, ...), SharedLayerDesc("embed", Emb, ...), ...])`;
with a single stage (num_stages=1, or a topology whose "pipe" size is 1) the layer builds every description in
order, with Paddle's per-layer seed (paddle.seed(1234 + index)), shares the layer of a SharedLayerDesc key
between its uses (calling forward_func(shared_layer, x) where given), and runs them in sequence, recomputing
`recompute_interval` layers at a time when asked. Splitting the layers over several pipeline stages (the 1F1B
schedule) is not implemented: more than one stage is refused with a clear error."""

from __future__ import annotations

import functools

import oarlock
import oarlock.nn as nn
from oarlock_parallel.recompute import recompute

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


def _stages(num_stages, topology) -> int:
    if num_stages is None and topology is None:
        raise ValueError("PipelineLayer(): should provide num_stages or topology")
    stages = topology.get_dim_size("pipe") if topology is not None else num_stages
    if num_stages is not None and stages != num_stages:
        raise ValueError(f"PipelineLayer(): num_stages={num_stages} differs from the topology's pipe size {stages}")
    if stages != 1:
        raise NotImplementedError(f"PipelineLayer(): {stages} pipeline stages were asked for; oarlock runs a "
                                  "PipelineLayer as one stage only (num_stages=1, or a topology with pipe size 1)")
    return stages


class PipelineLayer(nn.Layer):
    """The layers of `layers` (descriptions or built layers) run in sequence as one pipeline stage."""

    def __init__(self, layers, num_stages=None, topology=None, loss_fn=None, seg_method="uniform",
                 recompute_interval=0, recompute_ctx=None, num_virtual_pipeline_stages=None, use_cudagraph=False,
                 use_dualpipev=False):
        super().__init__()
        self._num_stages = _stages(num_stages, topology)
        if num_virtual_pipeline_stages not in (None, 1) or use_dualpipev:
            raise NotImplementedError("PipelineLayer(): virtual pipeline stages and dualpipev need several stages; "
                                      f"got num_virtual_pipeline_stages={num_virtual_pipeline_stages!r}, "
                                      f"use_dualpipev={use_dualpipev!r}")
        if recompute_interval > 0 and recompute_ctx is None:
            raise ValueError("PipelineLayer(): recompute_ctx must be given when recompute_interval > 0")
        self._loss_fn = loss_fn if isinstance(loss_fn, list) else [loss_fn]
        self._topo = topology
        self._recompute_interval = recompute_interval
        self.recompute_ctx = recompute_ctx
        self.seg_method = seg_method
        self._stage_id = 0
        self._base_seed = 1234
        self._layers_desc = list(layers)
        self._num_layers = len(self._layers_desc)
        self.shared_layers = nn.LayerDict()
        self.run_function = []
        self._build_layers()

    def _build_layers(self):
        local_weights = {}
        for index, desc in enumerate(self._layers_desc):
            oarlock.seed(self._base_seed + index)
            if isinstance(desc, nn.Layer):
                self.add_sublayer(str(index), desc)
                self.run_function.append(desc)
            elif isinstance(desc, LocalSharedLayerDesc):
                if desc.layer_name not in local_weights:
                    layer = desc.build_layer()
                    local_weights[desc.layer_name] = {a: getattr(layer, a) for a in desc.shared_weight_attr}
                else:
                    layer = desc.build_layer(**local_weights[desc.layer_name])
                self.add_sublayer(str(index), layer)
                self._append(layer, desc.forward_func)
            elif isinstance(desc, SharedLayerDesc):
                if desc.layer_name not in self.shared_layers:
                    self.shared_layers[desc.layer_name] = desc.build_layer()
                self._append(self.shared_layers[desc.layer_name], desc.forward_func)
            elif isinstance(desc, LayerDesc):
                layer = desc.build_layer()
                self.add_sublayer(str(index), layer)
                self.run_function.append(layer)
            elif callable(desc):
                self.run_function.append(desc)
            else:
                raise TypeError(f"PipelineLayer(): layers[{index}] is a {type(desc).__name__}; accepted: a Layer, a "
                                "LayerDesc / SharedLayerDesc or a callable")

    def _append(self, layer, forward_func):
        self.run_function.append(layer if forward_func is None else functools.partial(forward_func, layer))

    def get_stage_from_index(self, layer_idx):
        if not 0 <= layer_idx < self._num_layers:
            raise ValueError(f"PipelineLayer.get_stage_from_index(): layer index {layer_idx} is out of range "
                             f"[0, {self._num_layers})")
        return 0

    def get_num_virtual_stages(self):
        return 1

    def get_model_chunks(self):
        return None

    def forward_function(self, start, end):
        def execute(*x):
            x = x[0] if len(x) == 1 else x
            for layer in self.run_function[start:end]:
                x = layer(x)
            return x
        return execute

    def forward(self, input, chunk_id=None):
        if chunk_id is not None:
            raise ValueError(f"PipelineLayer.forward(): chunk_id={chunk_id!r} is only valid with virtual pipeline "
                             "stages; accepted: None")
        n = len(self.run_function)
        if self._recompute_interval == 0:
            return self.forward_function(0, n)(input)
        for start in range(0, n, self._recompute_interval):
            end = min(start + self._recompute_interval, n)
            args = input if isinstance(input, tuple) else (input,)
            if self._need_recompute(self.run_function[start:end], args):
                input = recompute(self.forward_function(start, end), *args,
                                  preserve_rng_state=self.recompute_ctx.get("preserve_rng_state", True))
            else:
                input = self.forward_function(start, end)(*args)
        return input

    @staticmethod
    def _need_recompute(funcs, inputs):
        if not any(isinstance(t, oarlock.Tensor) and not t.stop_gradient for t in inputs):
            return False
        return any(len(list(f.parameters())) > 0 for f in funcs if isinstance(f, nn.Layer))
