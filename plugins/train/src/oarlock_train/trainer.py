"""The training loop of `oarlock train`: model, AdamW with warmup + cosine decay, batches, evaluation.

Everything random (initialisation, the batches drawn, dropout) comes from
oarlock's generators after `oarlock.seed(seed)`, so a run is a function of its
options; the checkpoint stores those generators' state, so a resumed run draws
exactly the batches the uninterrupted run would have drawn.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import oarlock
from oarlock_train.corpus import Corpus
from oarlock_train.model import GPT, GPTConfig
from oarlock_train.moe_model import DEFAULT_AUX_WEIGHT, MoEConfig, build_model


EVAL_BATCH = 64  # rows per forward pass in evaluation: no graph is kept, so larger batches cost little memory


@dataclass(frozen=True)
class TrainConfig:
    """The options a run's losses depend on; resuming requires the same values."""

    steps: int
    seed: int = 0
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 6e-3
    min_lr_ratio: float = 0.1
    warmup: int = 0
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    dropout: float = 0.0
    document_mask: bool = True  # attention stays inside each packed document (flashmask_attention)
    moe_experts: int = 0        # > 0: every block's MLP is a mixture of this many experts (moe_model)
    moe_top_k: int = 2          # experts per token
    moe_aux_weight: float = DEFAULT_AUX_WEIGHT  # the gates' aux (load-balancing) loss enters the objective times this
    moe_expert_hidden: int | None = None  # each expert's hidden width (None: the dense MLP's)
    fp8: str | None = None      # --fp8: every Linear in FP8 with this recipe ("blockwise", "delayed", "current")

    @property
    def moe(self):
        """The moe_model.MoEConfig of a mixture-of-experts run, None for the dense GPT."""
        return None if not self.moe_experts else MoEConfig(self.moe_experts, self.moe_top_k, self.moe_expert_hidden)


@dataclass
class History:
    """Losses so far (nats per byte): one train loss per step, validation losses as (step, loss); with
    experts, the aux loss of each step (the gates' sum, before the weight) in `aux`."""

    train: list = field(default_factory=list)
    valid: list = field(default_factory=list)
    aux: list = field(default_factory=list)


def build_schedule(cfg: TrainConfig):
    """Linear warmup from 0 to lr over `warmup` steps, then cosine decay to lr * min_lr_ratio at `steps`."""
    lr = oarlock.optimizer.lr
    decay_steps = max(1, cfg.steps - cfg.warmup)
    cosine = lr.CosineAnnealingDecay(learning_rate=cfg.lr, T_max=decay_steps, eta_min=cfg.lr * cfg.min_lr_ratio)
    if cfg.warmup == 0:
        return cosine
    return lr.LinearWarmup(learning_rate=cosine, warmup_steps=cfg.warmup, start_lr=0.0, end_lr=cfg.lr)


def _with_fp8(model, recipe: str | None):
    """The model with every nn.Linear but the output head computing in FP8 under the named recipe
    (oarlock-incubate's convert_to_fp8: the same parameters, float32 master weights; the head stays float32, as
    DeepSeek-V3's FP8 recipe keeps it in higher precision); unchanged for None."""
    if recipe is None:
        return model
    from oarlock.incubate.fp8 import convert_to_fp8, recipe_named
    return convert_to_fp8(model, recipe_named(recipe), exclude=("head",))


class Trainer:
    """One process training model.GPT. parallel.ParallelTrainer overrides the hooks below (the model this
    process holds, its share of each batch, the sums over data-parallel ranks, full-weight checkpoints)."""

    is_main = True  # this process prints, plots and writes the checkpoint
    data_ranks = 1  # processes that take different shares of each batch

    def __init__(self, cfg: TrainConfig, corpus: Corpus):
        self.cfg, self.corpus = cfg, corpus
        oarlock.seed(cfg.seed)  # before the model is built: initialisation is the first use of the stream
        # model: the Layer this process holds (its loss(), its state); wrapped: what runs forward in training
        self.model = self._local_model(_with_fp8(build_model(GPTConfig(max_seq_len=cfg.seq_len,
                                                                        dropout=cfg.dropout), cfg.moe), cfg.fp8))
        self.scheduler = build_schedule(cfg)
        optimizer = oarlock.optimizer.AdamW(
            learning_rate=self.scheduler, parameters=self.model.parameters(), beta1=0.9, beta2=0.95,
            weight_decay=cfg.weight_decay, grad_clip=self._grad_clip())
        self.wrapped, self.optimizer = self._distribute(self.model, optimizer)
        self.train_rows = oarlock.to_tensor(corpus.train)
        self.valid_rows = oarlock.to_tensor(corpus.valid)
        self.step = 0
        self.history = History()
        self.measure_grad_norm = False  # set by --log-dir: train_step then fills grad_norm
        self.grad_norm: float | None = None
        # set by --recompute / --memory-budget (bytes): applied by plan_memory() before the first step
        self.recompute = False
        self.memory_budget: int | None = None
        self.memory_planner = None
        self.sdc = self._sdc_monitor()   # oarlock launch --sdc-check: silent-data-corruption checks, else None

    # -- hooks of the parallel trainer ------------------------------------------------------------------------
    def _local_model(self, full: GPT):
        """The model this process trains, made from the freshly initialised full model."""
        return full

    def _distribute(self, model, optimizer):
        """(the model that runs forward in training, the optimizer that steps)."""
        return model, optimizer

    def _grad_clip(self):
        """The optimizer's gradient clip: by the global norm of every gradient."""
        return oarlock.nn.ClipGradByGlobalNorm(self.cfg.clip_norm)

    def _batch_share(self, index):
        """This process's rows of the global batch `index`."""
        return index

    def _sdc_monitor(self):
        """Under `oarlock launch --sdc-check` (OARLOCK_SDC_CHECK set): oarlock-resilience's SDCMonitor over this
        process's model and optimizer (it checks after every interval-th optimizer step, and the loss guards see
        each step's loss); None otherwise. Looked up through oarlock.distributed, so oarlock-train does not
        depend on the plugin unless the switch is used."""
        import os
        if os.environ.get("OARLOCK_SDC_CHECK", "").strip() in ("", "0"):
            return None
        splits = self._model_splits()
        if splits:   # SDC checks compare whole replicas; `oarlock train --sdc-check` refuses these before launch
            raise RuntimeError("oarlock train: --sdc-check compares data-parallel replicas of the whole model; "
                               f"{', '.join(splits)} splits it over ranks: use --dp (or --nproc alone)")
        resilience = getattr(oarlock.distributed, "resilience", None)
        if resilience is None or not hasattr(resilience, "SDCMonitor"):
            raise RuntimeError("oarlock train: OARLOCK_SDC_CHECK is set (oarlock launch --sdc-check) but "
                               "silent-data-corruption checks need the oarlock-resilience plugin: "
                               "pip install oarlock-resilience")
        return resilience.SDCMonitor.from_env(self.model, self.optimizer)

    def _model_splits(self) -> list[str]:
        """The options that split the model over this run's ranks (none in one process)."""
        return []

    def _valid_chunks(self) -> range:
        """The indices of the EVAL_BATCH-row chunks of the validation split this process evaluates."""
        return range(-(-len(self.corpus.valid) // EVAL_BATCH))

    def _zero_missing_gradients(self) -> None:
        """With experts: a zero gradient for the parameters backward did not reach (an expert no token was
        routed to in this step). Once a parameter had a gradient, clear_grad() leaves it zeros and AdamW moves
        it on its momentum; a parameter that never had one has None and AdamW skips it. Without this, a run
        resumed from a checkpoint (fresh gradients: None) would skip such an expert where the uninterrupted
        run moves it; with it every step moves every parameter, whatever the history."""
        if self.cfg.moe_experts:
            for param in self.model.parameters():
                if param.grad is None and not param.stop_gradient:
                    param.grad = oarlock.zeros(param.shape, dtype=param.dtype)

    def _sync_gradients(self) -> None:
        """After backward, before the optimizer step: make the gradients the batch's (nothing in one process;
        wrappers such as DataParallel do it inside backward)."""

    def _sum_over_data(self, *values: float) -> tuple:
        """The values summed over the processes that hold different data."""
        return values

    def _dropout_stream(self):
        """The generator state dropout draws from in training (a context manager)."""
        return contextlib.nullcontext()

    def _global_grad_norm(self):
        """The norm ClipGradByGlobalNorm clips (after backward, before step), or None where not measured."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return float(oarlock.global_norm(grads))

    def full_state(self) -> tuple[dict, dict]:
        """(model state_dict, optimizer state_dict) of the full model: what a checkpoint holds."""
        return self.model.state_dict(), self.optimizer.state_dict()

    def load_full_state(self, model_state: dict, optimizer_state: dict) -> None:
        self.model.set_state_dict(model_state)
        self.optimizer.set_state_dict(optimizer_state)

    def full_model(self) -> GPT:
        """A model.GPT with the trained weights (on the main process; what generates the sample)."""
        return self.model

    def _eval_model(self):
        """The model.GPT (or tensor-parallel GPT) evaluate() runs on this process's validation share."""
        return self.model

    def parameter_count(self) -> int:
        return self.model.num_parameters()

    def _planned_layers(self) -> list:
        """The layers --recompute / --memory-budget put under recompute or offload: the transformer blocks."""
        return list(self.model.blocks)

    def _batch_rows(self):
        """This rank's share of a batch of rows drawn uniformly (with replacement) from the train split."""
        index = self._batch_share(oarlock.randint(0, len(self.corpus.train), [self.cfg.batch_size]))
        return oarlock.index_select(self.train_rows, index, axis=0)

    def _forward_backward(self):
        """One forward and backward of a batch, no optimizer step: the memory planner's profiling step."""
        rows = self._batch_rows()
        with self._dropout_stream():
            self._objective(self.model.loss(rows, self.cfg.document_mask, forward=self.wrapped)).backward()
        self._sync_gradients()

    def plan_memory(self):
        """--recompute: every block under recompute; --memory-budget: fleet.utils.offload.MemoryPlanner chooses
        keep / recompute / offload per block (and optimizer states on host) from a profiled step. The profiling
        restores the random state and the gradients, so the losses are those of a run without a budget. The
        optimizer creates its states at its first step: until they exist (the first step of a fresh run) every
        block is offloaded, and the plan is made at the next step, when the profile sees them."""
        if not (self.recompute or self.memory_budget) or getattr(self.memory_planner, "fitted", False):
            return
        from oarlock.distributed.fleet.utils.offload import MemoryPlanner
        layers = self._planned_layers()
        if self.memory_planner is None:
            self.memory_planner = MemoryPlanner(layers, self.memory_budget or 2**62, optimizer=self.optimizer,
                                                parameters=self.model.parameters(),
                                                distributed=hasattr(self, "layout"))   # a rank of a --nproc run
        if not self.memory_budget:
            self.memory_planner.apply(["recompute"] * len(layers))
        elif not any(isinstance(v, oarlock.Tensor) for v in self.optimizer.state_dict().values()):
            self.memory_planner.apply(["offload"] * len(layers))
            return
        else:
            self.memory_planner.fit(self._forward_backward)
        self.memory_planner.fitted = True

    # ----------------------------------------------------------------------------------------------------------
    @property
    def tokens_per_step(self) -> int:
        return self.cfg.batch_size * self.cfg.seq_len

    def train_step(self) -> float:
        """One optimisation step on a batch of rows drawn uniformly (with replacement) from the train split."""
        self.plan_memory()
        rows = self._batch_rows()
        with self._dropout_stream():
            loss = self.model.loss(rows, self.cfg.document_mask, forward=self.wrapped)
            self._objective(loss).backward()
        self._sync_gradients()
        self._zero_missing_gradients()
        if self.sdc is not None:   # the loss guards of the check that follows optimizer.step()
            self.sdc.record_loss(loss)
        if self.measure_grad_norm:
            # the norm the global-norm clip computes inside step(): one more pass over the gradients
            self.grad_norm = self._global_grad_norm()
        self.optimizer.step()
        self.optimizer.clear_grad()
        return self._finish_step(loss)

    def _objective(self, loss):
        """What backward differentiates: the cross entropy `loss`, plus with experts the gates' aux loss of
        the forward just run times --moe-aux-weight (its value kept for _finish_step in `last_aux`)."""
        self.last_aux = None
        aux = self.model.aux_loss() if self.cfg.moe_experts else None
        if aux is None:
            return loss
        self.last_aux = aux
        return loss + self.cfg.moe_aux_weight * aux

    def _finish_step(self, loss) -> float:
        """After the optimizer step: the schedule's step, the step count, and the batch's loss (and aux loss)
        recorded."""
        self.scheduler.step()
        self.step += 1
        aux = getattr(self, "last_aux", None)
        # every data rank's loss is the mean over an equal share of the batch: their mean is the batch's (the
        # aux loss is the whole batch's on every rank, moe_model's gates having global_aux: the mean is it too)
        values = self._sum_over_data(float(loss.item()), *([] if aux is None else [float(aux.item())]))
        value = values[0] / self.data_ranks
        self.history.train.append(value)
        if aux is not None:
            self.history.aux.append(values[1] / self.data_ranks)
        return value

    def evaluate(self) -> float:
        """Mean loss per byte over the whole validation split (dropout off, no graph).

        The MoE gates draw random numbers in evaluation too (GShardGate's random routing): each chunk of
        EVAL_BATCH rows draws them seeded by the run's seed and the chunk's index, and the training stream is
        restored afterwards, so a validation loss does not depend on which rank evaluates which chunk and
        evaluating does not move the batches drawn after it."""
        model = self._eval_model()
        model.eval()
        total, count = 0.0, 0
        state = oarlock.get_rng_state()
        try:
            with oarlock.no_grad():
                for chunk in self._valid_chunks():
                    rows = self.valid_rows[chunk * EVAL_BATCH:(chunk + 1) * EVAL_BATCH]
                    if self.cfg.moe_experts:
                        oarlock.seed(self.cfg.seed + chunk)
                    total += float(model.loss(rows, self.cfg.document_mask).item()) * rows.shape[0]
                    count += rows.shape[0]
        finally:
            model.train()
            oarlock.set_rng_state(state)
        total, count = self._sum_over_data(total, count)
        value = total / count
        self.history.valid.append((self.step, value))
        return value
