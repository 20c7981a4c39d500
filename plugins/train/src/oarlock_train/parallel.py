"""`oarlock train --nproc N [--dp D] [--mp M] [--sharding S] [--sp]`: the same GPT trained on N local ranks.

The command checks the options, then starts `oarlock launch -n N` (oarlock-xccl's launcher, through
`python -m oarlock.cli launch`) on rank_main.py with the same options; every rank runs the command's
training loop with a ParallelTrainer:

* fleet.init with hybrid_configs dp_degree=D, mp_degree=M, sharding_degree=S (pp 1);
* the model: model.GPT built and initialised exactly as one process builds it (same seed), then, with
  M > 1, parallel_model.ParallelGPT takes its slices of those full weights, so every layout starts from
  the one-process weights; fleet.distributed_model / distributed_optimizer wrap it and the AdamW
  (gradients averaged over dp and sharding, clipping over mp, optimizer states partitioned by sharding);
* each step draws the global batch as one process does and each of the D x S data ranks takes an equal
  contiguous share; the logged loss is the mean over the data ranks, i.e. the global batch's loss;
* rank 0 alone prints, plots and writes: checkpoints hold the full weights and optimizer states (gathered
  from every rank's slices), in the one-process format, so any layout resumes any other's checkpoint;
* --ep E (the MoE GPT of moe_model, with --dp only): ep_degree E, the expert axis inside the data axis;
  each rank keeps its experts of the full model, the E ranks take different rows as data ranks do,
  gradients are synchronised by sync_moe_gradients (dense ones over every rank, experts over their dp
  replicas) and clipped by ClipGradForMOEByGlobalNorm on a plain optimizer (no fleet wrappers), and
  evaluation runs the gathered full model on every rank (no all-to-all in evaluation).
* the MoE GPT under --ep or --dp: its gates get the group of every data rank (batch_group) with global_aux,
  so random routing and the aux loss are one process's over the whole batch; plain --dp MoE runs also
  synchronise by sync_moe_gradients rather than fleet's DataParallel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

import oarlock
from oarlock_train.model import GPT, GPTConfig
from oarlock_train.moe_model import MoEGPT, build_model, is_expert
from oarlock_train.parallel_model import ParallelGPT, check_layout, shard, split_of, unshard
from oarlock_train.trainer import Trainer


@dataclass(frozen=True)
class Layout:
    """How a run is split: nproc = dp * ep * mp * sharding * pp ranks; sp: sequence parallel inside the mp
    group; pp pipeline stages of vpp model chunks each, running `micro_batches` micro-batches under
    `schedule`; ep: expert parallel (the MoE GPT's experts split over ep ranks, which take different rows)."""

    nproc: int = 1
    dp: int = 1
    mp: int = 1
    sharding: int = 1
    sp: bool = False
    pp: int = 1
    vpp: int = 1
    micro_batches: int = 1
    schedule: str = "1F1B"
    ep: int = 1

    @property
    def data_ranks(self) -> int:
        return self.dp * self.ep * self.sharding

    def model_splits(self) -> list[str]:
        """The options that split the model over ranks (each rank holds a part of it), e.g. ["--mp 2"]."""
        return [f"--{name} {getattr(self, name)}" for name in ("mp", "pp", "sharding", "ep")
                if getattr(self, name) > 1]

    def describe(self) -> str:
        parts = [f"dp {self.dp}"] + ([f"sharding {self.sharding} (stage 1)"] if self.sharding > 1 else [])
        parts += [f"ep {self.ep}"] if self.ep > 1 else []
        parts.append(f"mp {self.mp}" + (" + sequence parallel" if self.sp else ""))
        if self.pp > 1:
            parts.append(f"pp {self.pp}" + (f" x vpp {self.vpp}" if self.vpp > 1 else "") +
                         f" ({self.schedule}, {self.micro_batches} micro-batches)")
        return " x ".join(parts)


def layout_of(nproc: int, dp: int | None, mp: int, sharding: int, sp: bool, batch_size: int,
              seq_len: int, pp: int = 1, vpp: int = 1, micro_batches: int | None = None,
              schedule: str | None = None, ep: int = 1) -> Layout:
    """The Layout the options ask for; ValueError naming the option when they do not fit together."""
    pipe, times_pp = (f" x --pp {pp}", " x pp") if pp > 1 else ("", "")
    pipe, times_pp = (pipe + f" x --ep {ep}", times_pp + " x ep") if ep > 1 else (pipe, times_pp)
    if dp is None:   # what mp, sharding, pp and ep leave
        if nproc % (mp * sharding * pp * ep):
            raise ValueError(f"argument --nproc: {nproc} ranks cannot be split into --mp {mp} x --sharding "
                             f"{sharding}{pipe} groups; --nproc must be a multiple of mp x sharding{times_pp}")
        dp = nproc // (mp * sharding * pp * ep)
    if dp * mp * sharding * pp * ep != nproc:
        raise ValueError(f"argument --nproc: --dp {dp} x --mp {mp} x --sharding {sharding}{pipe} = "
                         f"{dp * mp * sharding * pp * ep} ranks, but --nproc is {nproc}; their product must equal "
                         f"--nproc")
    if sp and mp == 1:
        raise ValueError("argument --sp: sequence parallel splits the sequence over the tensor-parallel ranks; "
                         "it needs --mp 2 or more")
    if pp == 1 and (vpp > 1 or micro_batches is not None or schedule is not None):
        given = "--vpp" if vpp > 1 else "--micro-batches" if micro_batches is not None else "--schedule"
        raise ValueError(f"argument {given}: pipeline options need --pp 2 or more")
    if pp > 1 and (mp > 1 or sharding > 1):
        raise ValueError("argument --pp: the pipeline GPT of oarlock train combines with --dp only; --mp and "
                         "--sharding are not supported together with --pp")
    data = dp * sharding * ep
    if batch_size % data:
        by = f"--dp {dp} x --sharding {sharding}" + (f" x --ep {ep}" if ep > 1 else "")
        raise ValueError(f"argument --batch-size: {batch_size} rows cannot be shared equally by the "
                         f"{data} data ranks ({by}); use a multiple of {data}")
    rows = batch_size // data
    if pp > 1:
        micro_batches = micro_batches or (2 * pp if rows % (2 * pp) == 0 else rows)
        if rows % micro_batches:
            raise ValueError(f"argument --micro-batches: each data rank's {rows} rows of a batch cannot be cut into "
                             f"{micro_batches} equal micro-batches; use a divisor of {rows}")
        schedule = schedule or ("VPP" if vpp > 1 else "1F1B")
        from oarlock_parallel.pipeline_schedules import build_schedule
        try:    # the schedule's own refusals (e.g. VPP's micro-batch count), before any rank starts
            build_schedule(schedule, pp, micro_batches, 0, vpp)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"argument --schedule: {exc}") from None
    layout = Layout(nproc, dp, mp, sharding, sp, pp, vpp, micro_batches or 1, schedule or "1F1B", ep)
    problems = check_layout(GPTConfig(max_seq_len=seq_len), mp, sp)
    if problems:
        raise ValueError("argument --mp: " + "; ".join(problems))
    return layout


RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_main.py")


def launch(nproc: int, argv: list[str]) -> int:
    """Run rank_main.py with argv on nproc ranks through `oarlock launch`; its exit status (130 on Ctrl-C)."""
    command = [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(nproc), RANK_SCRIPT, *argv]
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:   # the launcher got the SIGINT too and stops the ranks
        return 130


# the tracker state dropout draws from in training; its seed is offset far from the tracker's
# model-parallel seeds (seed + 1 + mp rank), which must differ from it
DROPOUT_RNG, DROPOUT_SEED_OFFSET = "oarlock_train_dropout", 100_003


class ParallelTrainer(Trainer):
    """Trainer of one rank of a parallel run (inside `oarlock launch`)."""

    def __init__(self, cfg, corpus, layout: Layout):
        import oarlock.distributed as dist
        from oarlock.distributed import fleet

        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": layout.dp, "mp_degree": layout.mp, "pp_degree": layout.pp,
                                   "sharding_degree": layout.sharding, "ep_degree": layout.ep}
        if layout.pp > 1:
            rows = cfg.batch_size // layout.data_ranks
            strategy.pipeline_configs = {"accumulate_steps": layout.micro_batches, "schedule_mode": layout.schedule,
                                         "micro_batch_size": rows // layout.micro_batches}
        strategy.tensor_parallel_configs = {"tensor_init_seed": cfg.seed}
        if layout.ep > 1:   # the expert axis inside the data axis: rank = dp rank x ep + ep rank (data_rank)
            order = list(strategy.hybrid_parallel_order)
            strategy.hybrid_parallel_order = order[:order.index("dp") + 1] + ["ep"] + order[order.index("dp") + 1:]
        fleet.init(is_collective=True, strategy=strategy)
        hcg = fleet.get_hybrid_communicate_group()
        self.layout, self.hcg, self.dist = layout, hcg, dist
        self.is_main = dist.get_rank() == 0
        self.data_ranks = layout.data_ranks
        # the expert-parallel ranks hold different rows too: the MoE layers exchange their tokens
        self.moe_group = None
        if layout.ep > 1:   # the experts' ranks; the replicas of this rank's experts; the dense parameters' ranks
            from oarlock.incubate.distributed.models.moe import expert_parallel_groups
            self.moe_group, self._expert_dp_group, self._dense_group = expert_parallel_groups(hcg)
        ep_rank = 0 if self.moe_group is None else self.moe_group.rank
        self.data_rank = ((hcg.get_data_parallel_rank() * layout.ep + ep_rank) * layout.sharding
                          + hcg.get_sharding_parallel_rank())
        # a MoE model whose batch is split over ranks: its gates see the whole batch through batch_group, and
        # sync_moe_gradients synchronises its gradients (fleet's DataParallel is not used: see _distribute)
        self.moe_split = bool(cfg.moe_experts) and layout.data_ranks > 1
        self.batch_group = self._make_batch_group(hcg) if self.moe_split else None
        if self.moe_split and self.moe_group is None:   # plain --dp: the experts are replicated like the rest
            self._expert_dp_group = self._dense_group = hcg.get_data_parallel_group()
        self.mp_rank = hcg.get_model_parallel_rank()
        self._data_groups = [g for g in (hcg.get_data_parallel_group(), self.moe_group,
                                         hcg.get_sharding_parallel_group()) if g is not None and g.nranks > 1]
        super().__init__(cfg, corpus)

    def _model_splits(self) -> list[str]:
        return self.layout.model_splits()

    def _make_batch_group(self, hcg):
        """The group whose rank i holds data share i of every batch (what the MoE gates' batch_group needs):
        the moe group under --ep alone, the data-parallel group under --dp alone, every rank under both."""
        if self.layout.dp == 1:
            group = self.moe_group
        elif self.layout.ep == 1:
            group = hcg.get_data_parallel_group()
        else:
            group = self._dense_group if self._dense_group is not None else self.dist.new_group(
                list(range(self.dist.get_world_size())))
        if group.nranks != self.layout.data_ranks or group.rank != self.data_rank:
            raise RuntimeError(f"ParallelTrainer: the MoE batch group (rank {group.rank} of {group.nranks}) does "
                               f"not follow the data ranks (data rank {self.data_rank} of {self.layout.data_ranks})")
        return group

    def _local_model(self, full: GPT):
        self.full_names = list(full.state_dict())
        model = full
        if self.moe_split:   # this rank's experts, taken from the full model's; gates over the whole batch
            state = oarlock.get_rng_state()
            model = MoEGPT(full.cfg, full.moe, moe_group=self.moe_group, batch_group=self.batch_group)
            oarlock.set_rng_state(state)
            model.load_full_state_dict(full.state_dict())
        if self.layout.mp > 1:
            # the slices come from the full weights: the one-process random stream stays where it is
            state = oarlock.get_rng_state()
            model = ParallelGPT(full.cfg, sequence_parallel=self.layout.sp)
            oarlock.set_rng_state(state)
            model.load_full_state_dict(full.state_dict())
            if list(model.state_dict()) != self.full_names:
                raise RuntimeError("ParallelGPT must have model.GPT's parameters, in the same order")
        # the one-process optimizer keys its state by position (param_<i>); naming every parameter so keeps
        # the keys whatever the wrappers do with the parameter list (sharding gives each rank a part; an
        # expert-parallel rank holds some experts: i is the position of the expert in the full model)
        self._global = getattr(model, "global_name", lambda name: name)
        position = {name: i for i, name in enumerate(self.full_names)}
        for name, param in model.named_parameters():
            param.name = f"param_{position[self._global(name)]}"
        self.param_names = {f"param_{i}": name for i, name in enumerate(self.full_names)}
        self.local_params = {p.name for p in model.parameters()}
        return model

    def _is_expert_param(self, param) -> bool:
        if not hasattr(self, "_experts"):
            self._experts = {id(p) for name, p in self.model.named_parameters() if is_expert(name)}
        return id(param) in self._experts

    def _grad_clip(self):
        if self.moe_group is None:
            return super()._grad_clip()
        # the norm over every rank's experts: each rank's expert norms summed over the expert-parallel group
        from oarlock.incubate.distributed.models.moe import ClipGradForMOEByGlobalNorm
        return ClipGradForMOEByGlobalNorm(self.cfg.clip_norm, is_expert_param_func=self._is_expert_param,
                                          moe_group=self.moe_group)

    def _eval_model(self):
        # an expert-parallel model runs all-to-alls in every forward, which ranks evaluating different numbers
        # of chunks cannot do together: each rank evaluates the gathered full model
        # (and the gates of a model whose batch is split sum over batch_group in every forward, too)
        return self.full_model(everywhere=True) if self.moe_split else super()._eval_model()

    def _dropout_stream(self):
        # The batch indices come from the default stream, the same on every rank; dropout must not: data
        # ranks drop different units of their different rows, and with --sp so do the mp ranks on their parts
        # of the sequence (without it they hold the same activations and must drop the same units).
        if not self.cfg.dropout:
            return super()._dropout_stream()
        from oarlock.distributed.fleet.meta_parallel import get_rng_state_tracker

        tracker = get_rng_state_tracker()
        if DROPOUT_RNG not in tracker.states_:
            stream = self.data_rank * self.layout.mp + (self.mp_rank if self.layout.sp else 0)
            tracker.add(DROPOUT_RNG, self.cfg.seed + DROPOUT_SEED_OFFSET + stream)
        return tracker.rng_state(DROPOUT_RNG)

    def _distribute(self, model, optimizer):
        if self.moe_split:   # _sync_gradients synchronises (the gates' all-reduces run inside backward, which
            return model, optimizer   # DataParallel's buckets, launched as gradients arrive, could cross)
        from oarlock.distributed import fleet
        return fleet.distributed_model(model), fleet.distributed_optimizer(optimizer)

    def _batch_share(self, index):
        share = self.cfg.batch_size // self.data_ranks
        return index[self.data_rank * share:(self.data_rank + 1) * share]

    def _valid_chunks(self) -> range:
        return super()._valid_chunks()[self.data_rank::self.data_ranks]

    def _sync_gradients(self) -> None:
        if not self.moe_split:
            return   # fleet's DataParallel (or the hybrid optimizer) has synchronised them
        # dense gradients averaged over every rank, each expert's summed over its data-parallel replicas
        from oarlock.incubate.distributed.models.moe import sync_moe_gradients
        sync_moe_gradients(self.model.parameters(), self._is_expert_param, dense_group=self._dense_group,
                           expert_dp_group=self._expert_dp_group)

    def _sum_over_data(self, *values):
        total = oarlock.to_tensor(np.asarray(values, dtype=np.float64))
        for group in self._data_groups:
            self.dist.all_reduce(total, group=group)
        return tuple(float(v) for v in total.numpy())

    def _global_grad_norm(self):
        # DataParallel has averaged the gradients in backward: the plain norm is the clipped one; with mp
        # or sharding the wrapped optimizer reduces them inside step(), so the norm is not measured here
        if self.layout.mp == 1 and self.layout.sharding == 1 and self.layout.ep == 1:
            return super()._global_grad_norm()
        return None

    # -- checkpoints: full weights -----------------------------------------------------------------------------
    def _split_of(self, key: str):
        """The split of a model or optimizer state key (param_<i>_moment1_0 ...)."""
        if self.layout.mp == 1:
            return None
        optimizer_key = re.match(r"(param_\d+)_", key)
        return split_of(self.param_names[optimizer_key.group(1)] if optimizer_key else key)

    def full_state(self, everywhere: bool = False):
        """Gathered from every rank (every rank calls it; the others get empty dicts unless `everywhere`):
        each key from the mp ranks that hold its slices, joined when split (the optimizer states of a sharded
        run from the ranks that own them, the experts from the expert-parallel ranks that hold them)."""
        if self.layout.mp == 1 and self.layout.sharding == 1 and self.layout.ep == 1:
            return super().full_state()   # data-parallel replicas hold the same full state

        def arrays(state, rename=lambda k: k):
            return {rename(k): v.numpy() if isinstance(v, oarlock.Tensor) else v for k, v in state.items()}

        mine = (self.mp_rank, arrays(self.model.state_dict(), self._global), arrays(self.optimizer.state_dict()))
        gathered: list = []
        self.dist.all_gather_object(gathered, mine)
        if not (self.is_main or everywhere):   # only the main rank writes or generates
            return {}, {}
        model_state, optimizer_state = (self._join([(g[0], g[which]) for g in gathered]) for which in (1, 2))
        # in the full model's order (the expert-parallel ranks' experts arrive rank by rank)
        return {k: model_state[k] for k in self.full_names}, optimizer_state

    def _join(self, pieces) -> dict:
        by_key: dict = {}
        for mp_rank, state in pieces:
            for key, value in state.items():
                by_key.setdefault(key, {}).setdefault(mp_rank, value)
        out = {}
        for key, parts in by_key.items():
            split, first = self._split_of(key), parts[min(parts)]
            if split is not None and isinstance(first, np.ndarray) and first.ndim:
                if len(parts) != self.layout.mp:
                    raise RuntimeError(f"checkpoint: {key!r} is held by mp ranks {sorted(parts)}, not all "
                                       f"{self.layout.mp}")
                value = oarlock.to_tensor(unshard([parts[r] for r in range(self.layout.mp)], split))
            else:
                value = oarlock.to_tensor(first) if isinstance(first, np.ndarray) else first
            out[key] = value
        return out

    def load_full_state(self, model_state: dict, optimizer_state: dict) -> None:
        if self.moe_group is not None:   # this rank's experts (named as the full model names them) only
            model_state = {k: model_state[self._global(k)] for k in self.model.state_dict()}
            owner = {k: re.match(r"(param_\d+)_", k) for k in optimizer_state}
            optimizer_state = {k: v for k, v in optimizer_state.items()
                               if owner[k] is None or owner[k].group(1) in self.local_params}

        def local(key, value):
            split = self._split_of(key)
            if split is None or not isinstance(value, oarlock.Tensor) or value.ndim == 0:
                return value
            return oarlock.to_tensor(shard(value.numpy(), split, self.mp_rank, self.layout.mp))

        self.model.set_state_dict({k: local(k, v) for k, v in model_state.items()})
        self.optimizer.set_state_dict({k: local(k, v) for k, v in optimizer_state.items()})

    def full_model(self, everywhere: bool = False) -> GPT:
        """A model.GPT with the full trained weights on the main rank (None elsewhere unless `everywhere`);
        every rank calls it."""
        model_state, _ = self.full_state(everywhere)
        if not (self.is_main or everywhere):
            return None
        state = oarlock.get_rng_state()   # building it must not move the training stream
        model = build_model(GPTConfig(max_seq_len=self.cfg.seq_len, dropout=self.cfg.dropout), self.cfg.moe)
        oarlock.set_rng_state(state)
        model.set_state_dict(model_state)
        return model

