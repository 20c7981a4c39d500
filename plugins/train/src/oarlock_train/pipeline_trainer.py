"""`oarlock train --pp P [--vpp V] [--schedule S] [--micro-batches M] [--dp D]`: a rank of the pipeline run.

The model is pipeline_model's PipelineLayer of this rank's stages, with the weights of the one-process GPT
(same seed); fleet.distributed_model wraps it in PipelineParallel (PipelineParallelWithInterleave with
--vpp), whose train_batch runs the schedule over M micro-batches of this data rank's rows, steps the
optimizer and clears the gradients; the loss it returns (every stage gets it) is the batch mean. Optimizer
state keys are the one-process ones (param_<i>, i the parameter's position in model.GPT), so checkpoints hold
the full model in the one-process format: every rank contributes its stages' weights and states. Evaluation
and the sample run the full GPT gathered on every rank, on each data rank's share of the validation rows.
--recompute is PipelineLayer's recompute_interval=1; --memory-budget plans this rank's blocks with
MemoryPlanner, profiling with PipelineParallel.forward_backward_pipeline (every rank together).
"""

from __future__ import annotations

import re

import oarlock
from oarlock_train import pipeline_model
from oarlock_train.model import GPT, GPTConfig
from oarlock_train.parallel import ParallelTrainer


class PipelineTrainer(ParallelTrainer):
    def __init__(self, cfg, corpus, layout, recompute: bool = False):
        self.recompute_stages = recompute    # PipelineLayer's recompute_interval, fixed when the stages are built
        super().__init__(cfg, corpus, layout)

    def _local_model(self, full: GPT):
        self.full_names = list(full.state_dict())
        self.full_count = full.num_parameters()
        self.gpt_cfg = full.cfg
        state = oarlock.get_rng_state()   # building the stages must not move the training stream
        pipeline = pipeline_model.build(full.cfg, self.hcg, self.layout.vpp, recompute=self.recompute_stages)
        oarlock.set_rng_state(state)
        pipeline_model.load_full(pipeline, full.cfg, full.state_dict())
        names = pipeline_model.full_names(pipeline, full.cfg)
        position = {name: i for i, name in enumerate(full.state_dict())}
        for param in pipeline.parameters():
            param.name = f"param_{position[names[id(param)]]}"
        self.local_params = {p.name for p in pipeline.parameters()}
        return pipeline

    def parameter_count(self) -> int:
        return self.full_count

    def _global_grad_norm(self):
        return None     # the pipeline's optimizer reduces over the stages inside train_batch

    def _data(self):
        return pipeline_model.rows_to_data(self._batch_rows(), self.cfg.document_mask)

    def train_step(self) -> float:
        self.plan_memory()
        data = self._data()
        with self._dropout_stream():
            loss = self.wrapped.train_batch(data, self.optimizer)
        return self._finish_step(loss)

    # -- --memory-budget ------------------------------------------------------------------------------------------
    def _planned_layers(self) -> list:
        return [layer for _, layer in pipeline_model.local_layers(self.model)
                if isinstance(layer, pipeline_model.BlockPipe)]

    def _forward_backward(self):
        if not hasattr(self.wrapped, "forward_backward_pipeline"):
            raise RuntimeError("oarlock train --memory-budget with --pp profiles with "
                               "PipelineParallel.forward_backward_pipeline, which this oarlock-parallel lacks")
        data = self._data()
        with self._dropout_stream():
            self.wrapped.forward_backward_pipeline(data)

    def plan_memory(self):
        if self.memory_budget:      # --recompute is the PipelineLayer's own (recompute_interval)
            super().plan_memory()

    # -- the full model: checkpoints, evaluation, the sample -----------------------------------------------------
    def full_state(self):
        mine = (pipeline_model.local_state(self.model, self.gpt_cfg),
                {k: v for k, v in self.optimizer.state_dict().items()})
        mine = tuple({k: v.numpy() if isinstance(v, oarlock.Tensor) else v for k, v in part.items()}
                     for part in mine)
        gathered: list = []
        self.dist.all_gather_object(gathered, mine)
        model_state, optimizer_state = {}, {}
        for model_part, optimizer_part in gathered:
            model_state.update(model_part)
            optimizer_state.update(optimizer_part)
        model_state = {k: oarlock.to_tensor(model_state[k]) for k in self.full_names}
        optimizer_state = {k: oarlock.to_tensor(v) if hasattr(v, "dtype") and hasattr(v, "shape") else v
                           for k, v in optimizer_state.items()}
        return model_state, optimizer_state

    def load_full_state(self, model_state: dict, optimizer_state: dict) -> None:
        pipeline_model.load_full(self.model, self.gpt_cfg, model_state)
        mine = {k: v for k, v in optimizer_state.items()
                if not (m := re.match(r"(param_\d+)_", k)) or m.group(1) in self.local_params}
        self.optimizer.set_state_dict(mine)

    def full_model(self) -> GPT:
        """The full GPT with the trained weights on every rank (every rank calls it)."""
        model_state, _ = self.full_state()
        state = oarlock.get_rng_state()
        model = GPT(GPTConfig(max_seq_len=self.cfg.seq_len, dropout=self.cfg.dropout))
        oarlock.set_rng_state(state)
        model.set_state_dict(model_state)
        return model

    def _eval_model(self):
        return self.full_model()
