"""PipelineParallel and PipelineParallelWithInterleave (Paddle 3.2's fleet/meta_parallel/pipeline_parallel.py):
what fleet.distributed_model returns when pp_degree > 1.

`train_batch(data, optimizer, ...)` cuts the batch into accumulate_steps micro-batches (pipeline_data), runs this
rank's action list of pipeline_schedules.build_schedule(schedule_mode, ...) and then: sums the gradients of
layers shared across stages, broadcasts the loss from the last stage to every stage, steps the optimizer,
clears the gradients and steps the LR scheduler (`forward_backward_pipeline` is the same without the optimizer;
its static_scheduler=True returns the schedule as Paddle's string). The loss is the sum over micro-batches of
loss / accumulate_steps (the mean of the micro-batch losses), Paddle's convention.

The schedule: Paddle's dygraph ignores `strategy.pipeline_configs['schedule_mode']` (always 1F1B, or interleaved
1F1B with virtual stages); oarlock honours it: any mode of pipeline_schedules.SCHEDULE_MODES. With virtual stages
the default "1F1B" means interleaved 1F1B ("VPP"). Actions are dispatched by kind through the table `ACTIONS`
({kind: method name}); a schedule that adds a kind adds one method and one entry.

- "F" (micro-batch m, local chunk c, global virtual stage v = c * num_stages + stage): the input is the
  micro-batch (v = 0) or a receive from the owner of v - 1; the chunk runs; the output goes to the owner
  of v + 1 by a non-blocking send, or, on the last virtual stage, the loss is computed (every loss_fn; backward
  starts from loss_fn[loss_fn_idx]).
- "B": the output gradient is received from the owner of v + 1 (or backward starts from the loss),
  the chunk back-propagates, and the gradients of the inputs that arrived with stop_gradient=False are sent
  back (non-blocking). When the schedule also has a "W" for that micro-batch and chunk, "B" computes only the
  input gradients (autograd.grad, graph kept) and "W" then accumulates the weight gradients (a second backward
  pass over the chunk: correct, not cheaper). With recompute on, a split backward would count the recomputed
  weights twice (recompute accumulates them inside its own backward), so "B" then does the whole backward and
  "W" nothing.

Every send is non-blocking and kept alive until the end of the step. Before an action computes, its own receive
and the next receive of the schedule are posted (`prefetch_receives`), so the next transfer proceeds during
this action's compute; each receive is waited for only where the action needs its value. Posting a receive
early never blocks, so a schedule still runs without deadlock exactly when its dependency graph is acyclic
(pipeline_simulator checks that). Before running, each rank checks its own list: one F and one B per
micro-batch and chunk, F before B, and the micro-batches of a chunk in increasing order (the transfers of a link
are matched in order, pipeline_p2p).

Hybrid parallelism goes through the HybridCommunicateGroup: at wrap time the replicated parameters are
broadcast over the model-parallel group, everything over the sharding and data-parallel groups, and the
shared layers from their first stage; tensor-parallel layers run inside the stages; the data-parallel gradient
average is HybridParallelOptimizer's (fleet.distributed_optimizer), which train_batch requires as Paddle does.

Bad input raises on every rank: the micro-batch checks are agreed over the job before any transfer. A stage that
cannot take what the previous one sent raises naming itself and what arrived; the ranks waiting on it are
released by the watchdog (OARLOCK_COLLECTIVE_TIMEOUT) with an error naming their stage.
"""

from __future__ import annotations


import oarlock
import oarlock.distributed as dist
from oarlock_parallel.dp_utils import (broadcast_dp_parameters, broadcast_mp_parameters,
                                       broadcast_sharding_parameters)
from oarlock_parallel.pipeline_data import MicroBatchError, micro_batches
from oarlock_parallel.pipeline_layers import PipelineLayer
from oarlock_parallel.pipeline_p2p import PipelineP2P
from oarlock_parallel.pipeline_struct import flatten
from oarlock_parallel.pipeline_swap import ActivationSwap
from oarlock_parallel.wrapper import WrapperLayer

__all__ = ["PipelineParallel", "PipelineParallelWithInterleave"]

_LOSS_DTYPES = ("float32", "float16", "bfloat16", "float64")


class _Step:
    """What one train_batch / eval_batch keeps between actions."""

    def __init__(self, micro, compute_loss: bool, training: bool, deferred_w: set, swapped=()):
        self.micro, self.compute_loss, self.training = micro, compute_loss, training
        self.deferred_w = deferred_w      # (micro_batch, chunk) whose weight gradients wait for a "W"
        self.saved: dict = {}             # (micro_batch, chunk) -> (input, output or loss) for "B"
        self.pending_w: dict = {}         # (micro_batch, chunk) -> (roots, grads) for "W"
        self.outputs: list = []           # eval without loss: the last chunk's outputs
        self.swap = ActivationSwap(swapped)   # (micro_batch, chunk) whose activations "O" offloads
        self.ahead = None                 # the next receive of the schedule after the running action


class PipelineParallel(WrapperLayer):
    """Run a PipelineLayer's stages together (see the module docstring). Paddle's signature
    PipelineParallel(layers, hcg, strategy): `strategy` is the fleet.DistributedStrategy (pipeline_configs:
    micro_batch_size, accumulate_steps, schedule_mode)."""

    ACTIONS = {"F": "_forward_action", "B": "_backward_action", "W": "_weight_action", "O": "_offload_action",
               "L": "_load_action"}
    # Post each action's receive and the schedule's next one before computing, so transfers overlap compute
    # (pipeline_p2p). False waits for each transfer when it is needed (bench/pipeline.py compares the two).
    prefetch_receives = True

    def __init__(self, layers, hcg, strategy):
        super().__init__()
        if not isinstance(layers, PipelineLayer):
            raise TypeError(f"{type(self).__name__}(): layers must be a PipelineLayer (the model as "
                            f"LayerDescs); got {type(layers).__name__}")
        from oarlock_parallel.pipeline_schedules import SCHEDULE_MODES
        self._layers, self._hcg, self._strategy = layers, hcg, strategy
        config = strategy.pipeline_configs
        self.micro_batch_size, self.accumulate_steps = config["micro_batch_size"], config["accumulate_steps"]
        for name in ("micro_batch_size", "accumulate_steps"):
            value = config[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{type(self).__name__}(): pipeline_configs[{name!r}] must be an int >= 1; got "
                                 f"{value!r}")
        self.num_stages = hcg.get_pipe_parallel_world_size()
        self.stage_id, self.global_rank = hcg.get_stage_id(), hcg.get_global_rank()
        self.pp_group = hcg.get_pipe_parallel_group()
        if layers._num_stages != self.num_stages:
            raise ValueError(f"{type(self).__name__}(): the PipelineLayer has {layers._num_stages} stages but "
                             f"pp_degree is {self.num_stages}; build it with topology=hcg.topology()")
        self.num_chunks = layers.get_num_virtual_stages()
        mode = config["schedule_mode"]
        if mode == "1F1B" and self.num_chunks > 1:
            mode = "VPP"     # interleaved 1F1B: what Paddle runs with virtual stages
        if mode not in SCHEDULE_MODES:
            raise ValueError(f"{type(self).__name__}(): pipeline_configs['schedule_mode'] is {mode!r}; accepted: "
                             f"{list(SCHEDULE_MODES)}")
        self.schedule_mode = mode
        self._virtual_pp_world_size = self.num_chunks if self.num_chunks > 1 else None
        self._virtual_pp_rank = 0 if self.num_chunks > 1 else None
        self._real_pp_world_size, self._real_pp_rank = self.num_stages, self.stage_id
        self.use_data_parallel = hcg.get_data_parallel_world_size() > 1
        self.use_model_parallel = hcg.get_model_parallel_world_size() > 1
        self.total_loss = None
        self._prepare_for_model()
        self._p2p = PipelineP2P(hcg, self.num_chunks)

    def _prepare_for_model(self):
        """The replicas made equal, as Paddle's MetaParallelBase does, and the shared layers synchronized."""
        hcg = self._hcg
        if hcg.get_model_parallel_world_size() > 1:
            broadcast_mp_parameters(self._layers, hcg)
        if hcg.get_sharding_parallel_world_size() > 1:
            broadcast_sharding_parameters(self._layers, hcg)
        if hcg.get_data_parallel_world_size() > 1:
            broadcast_dp_parameters(self._layers, hcg)
        if self._layers.shared_weights is not None:
            self._layers.shared_weights.synchronize()

    def forward(self, *inputs, **kwargs):
        return self._layers(*inputs, **kwargs)

    # -- Paddle's stage queries ----------------------------------------------------------------------------
    def is_pipeline_first_stage(self, ignore_virtual=False):
        if not ignore_virtual and self._virtual_pp_world_size is not None and self._virtual_pp_rank != 0:
            return False
        return self._real_pp_rank == 0

    def is_pipeline_last_stage(self, ignore_virtual=False):
        if not ignore_virtual and self._virtual_pp_world_size is not None and \
                self._virtual_pp_rank != self._virtual_pp_world_size - 1:
            return False
        return self._real_pp_rank == self._real_pp_world_size - 1

    def set_virtual_pipeline_rank(self, rank):
        self._virtual_pp_rank = rank

    # -- the step ------------------------------------------------------------------------------------------
    def train_batch(self, data, optimizer, lr_scheduler=None, scaler=None, loss_fn_idx=0,
                    return_micro_batch_loss=False):
        """One training step over `data` (see the module docstring); returns the loss on every stage (a 0-d
        tensor, or [accumulate_steps] per micro-batch with return_micro_batch_loss; a list with several loss_fn)."""
        from oarlock_parallel.hybrid_optimizer import HybridParallelOptimizer
        what = f"{type(self).__name__}.train_batch()"
        if not isinstance(optimizer, HybridParallelOptimizer):
            raise TypeError(f"{what}: optimizer must be the HybridParallelOptimizer of fleet.distributed_optimizer "
                            f"(it averages the data-parallel gradients and clips over the stages); got "
                            f"{type(optimizer).__name__}")
        if not oarlock.is_grad_enabled():
            raise RuntimeError(f"{what}: gradients are disabled (oarlock.no_grad); train_batch needs them")
        self._check_loss_fn(loss_fn_idx, what)
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        loss = self._forward_backward(data, scaler, return_micro_batch_loss, self._schedule(what), what)
        self._optimizer_step()
        return loss

    def forward_backward_pipeline(self, data, scaler=None, static_scheduler=False, return_micro_batch_loss=False):
        """Paddle's forward_backward_pipeline: train_batch without the optimizer step (the schedule's forwards
        and backwards of every micro-batch, the shared-weight gradient sum, the loss broadcast); the gradients
        stay in the parameters. With static_scheduler=True nothing runs: the schedule of this rank comes back
        as Paddle's string ("f0;f1;b0;...", "f0_vp1;" with virtual stages)."""
        what = f"{type(self).__name__}.forward_backward_pipeline()"
        actions = self._schedule(what)
        if static_scheduler:
            return "".join(f"{a.kind.lower()}{a.micro_batch}" + (f"_vp{a.chunk}" if self.num_chunks > 1 else "") + ";"
                           for a in actions)
        if not oarlock.is_grad_enabled():
            raise RuntimeError(f"{what}: gradients are disabled (oarlock.no_grad); training needs them")
        if not hasattr(self, "loss_fn_idx"):
            self._check_loss_fn(0, what)
        return self._forward_backward(data, scaler, return_micro_batch_loss, actions, what)

    def _forward_backward(self, data, scaler, return_micro_batch_loss, actions, what):
        self.scaler = scaler
        self._layers.train()
        deferred = set() if self._layers._recompute_interval > 0 else \
            {(a.micro_batch, a.chunk) for a in actions if a.kind == "W"}
        swapped = {(a.micro_batch, a.chunk) for a in actions if a.kind == "O"}
        self._run(actions, _Step(self._micro(data, what), True, True, deferred, swapped))
        self._layers.allreduce_shared_weight_gradients()
        return self._broadcast_final_loss(return_micro_batch_loss)

    def get_static_scheduler(self):
        """This rank's schedule as Paddle's string (forward_backward_pipeline(None, static_scheduler=True))."""
        return self.forward_backward_pipeline(data=None, static_scheduler=True)

    def eval_batch(self, data, compute_loss=False, loss_fn_idx=0, return_host_tensor=False):
        """The forward of every micro-batch (no gradients). With compute_loss: the loss on every stage, as
        train_batch returns it; without: this rank's outputs of its last chunk, one per micro-batch (on the last
        stage, the model's outputs). return_host_tensor is accepted (host and device are one memory on CPU)."""
        from oarlock_parallel.pipeline_schedules import Action
        what = f"{type(self).__name__}.eval_batch()"
        if compute_loss:
            self._check_loss_fn(loss_fn_idx, what)
        self._layers.eval()
        actions = [Action("F", m, c) for m in range(self.accumulate_steps) for c in range(self.num_chunks)]
        step = _Step(self._micro(data, what, labels=compute_loss), compute_loss, False, set())
        with oarlock.no_grad():
            self._run(actions, step)
        if compute_loss:
            return self._broadcast_final_loss(False)
        return step.outputs

    def _check_loss_fn(self, loss_fn_idx, what):
        self.loss_fn_idx = loss_fn_idx
        fns = self._layers._loss_fn
        if isinstance(loss_fn_idx, bool) or not isinstance(loss_fn_idx, int) or \
                not 0 <= loss_fn_idx < len(fns) or fns[loss_fn_idx] is None:
            raise ValueError(f"{what}: loss_fn_idx={loss_fn_idx!r} names no loss function; the PipelineLayer has "
                             f"loss_fn={fns!r} (give PipelineLayer(loss_fn=...))")

    def _micro(self, data, what: str, labels: bool = True) -> list:
        """The micro-batches, the checks agreed over the whole job (the data-parallel replicas too, whose gradient
        average would otherwise wait for a pipeline that stopped): every rank raises the first failing rank's
        error."""
        error = None
        try:
            micro = micro_batches(data, what, self.micro_batch_size, self.accumulate_steps,
                                  self.stage_id == 0, self.stage_id == self.num_stages - 1 and labels)
        except MicroBatchError as exc:
            error, micro = str(exc), None
        if dist.get_world_size() > 1:
            seen: list = []
            dist.all_gather_object(seen, error)
            if error is None and any(e is not None for e in seen):
                rank = next(i for i, e in enumerate(seen) if e is not None)
                stage = self._hcg.topology().get_coord(rank)._asdict().get("pipe", 0)
                error = f"pipeline stage {stage} (rank {rank}) refused its data: {seen[rank]}"
        if error is not None:
            raise MicroBatchError(error)
        return micro

    def _schedule(self, what: str) -> list:
        from oarlock_parallel.pipeline_schedules import build_schedule
        actions = build_schedule(self.schedule_mode, self.num_stages, self.accumulate_steps, self.stage_id,
                                 self.num_chunks)
        self._check_actions(actions, what)
        return actions

    def _check_actions(self, actions, what):
        where = f"{what}: schedule {self.schedule_mode!r} for stage {self.stage_id}"
        seen, last = set(), {}
        for a in actions:
            if a.kind not in self.ACTIONS:
                raise ValueError(f"{where} has an action of kind {a.kind!r}; {type(self).__name__} runs "
                                 f"{sorted(self.ACTIONS)}")
            key = (a.kind, a.micro_batch, a.chunk)
            if key in seen or not (0 <= a.micro_batch < self.accumulate_steps and 0 <= a.chunk < self.num_chunks):
                raise ValueError(f"{where}: {a!r} is repeated or out of range")
            needs = {"B": "F", "W": "B", "O": "F", "L": "O"}.get(a.kind)
            if needs is not None and (needs, a.micro_batch, a.chunk) not in seen:
                raise ValueError(f"{where}: {a!r} comes before what it needs")
            if a.kind in ("F", "B") and last.get((a.kind, a.chunk), -1) > a.micro_batch:
                raise ValueError(f"{where}: the {a.kind} actions of chunk {a.chunk} must go in increasing "
                                 "micro-batch order (a link's transfers are matched in order)")
            seen.add(key)
            last[(a.kind, a.chunk)] = a.micro_batch
        missing = [(k, m, c) for k in ("F", "B") for m in range(self.accumulate_steps) for c in range(self.num_chunks)
                   if (k, m, c) not in seen]
        if missing:
            raise ValueError(f"{where} lacks the actions {missing[:6]}")

    def _run(self, actions, step: _Step) -> None:
        self._p2p.new_step()
        self.total_loss = None
        receives = [self._receive_of(a) for a in actions]
        upcoming, following = [None] * len(actions), None
        for i in range(len(actions) - 1, -1, -1):   # the first receive after each action
            upcoming[i], following = following, receives[i] or following
        try:
            for action, own, ahead in zip(actions, receives, upcoming):
                step.ahead = ahead if self.prefetch_receives else None
                step.swap.settle()           # free the device memory of finished copies to host
                if self.prefetch_receives:   # post this action's receive and the next one before computing
                    self._post_receive(own, ahead=False)
                    self._post_receive(ahead, ahead=True)
                getattr(self, self.ACTIONS[action.kind])(action, step)   # timed from outside when measured
        except BaseException:
            self._p2p.new_step()     # sends to a stage that failed never complete: not waited for
            raise
        self._p2p.wait_sends()
        self.set_virtual_pipeline_rank(0 if self.num_chunks > 1 else None)

    def _receive_of(self, action):
        """("F" or "B", virtual stage, micro-batch) of the transfer `action` waits for, or None."""
        v = self._virtual(action.chunk)
        if (action.kind == "F" and v > 0) or (action.kind == "B" and not self._is_last_virtual(action.chunk)):
            return action.kind, v, action.micro_batch
        return None

    def _post_receive(self, receive, ahead: bool) -> None:
        if receive is not None:
            kind, v, m = receive
            (self._p2p.post_forward if kind == "F" else self._p2p.post_backward)(v, m, ahead)

    # -- the actions ---------------------------------------------------------------------------------------
    def _virtual(self, chunk: int) -> int:
        return chunk * self.num_stages + self.stage_id

    def _is_last_virtual(self, chunk: int) -> bool:
        return self._virtual(chunk) == self.num_stages * self.num_chunks - 1

    def _forward_action(self, action, step: _Step) -> None:
        m, c = action.micro_batch, action.chunk
        v = self._virtual(c)
        if self.num_chunks > 1:
            self.set_virtual_pipeline_rank(c)
        x = step.micro[m][0] if v == 0 else self._p2p.recv_forward(v, m)
        self._post_receive(step.ahead, ahead=True)   # again: a link's first input brought its metadata
        try:
            with step.swap.recording((m, c)):
                out = self._layers(x, chunk_id=c if self.num_chunks > 1 else None)
        except Exception as error:      # noqa: BLE001 - re-raised naming the stage and what it was given
            got = "its micro-batch" if v == 0 else f"what stage {(v - 1) % self.num_stages} sent: " \
                                                   f"{self._p2p.input_description(v)}"
            message = (f"{type(self).__name__}: pipeline stage {self.stage_id}" +
                       (f" (virtual stage {v})" if self.num_chunks > 1 else "") +
                       f", layers [{self._layers._start_poss[c]}, {self._layers._end_poss[c]}), cannot run "
                       f"micro-batch {m} on {got}: {type(error).__name__}: {error}")
            try:
                named = type(error)(message)
            except Exception:     # noqa: BLE001 - an exception type with another constructor
                named = RuntimeError(message)
            raise named from error
        if not self._is_last_virtual(c):
            self._p2p.send_forward(out, v, m)
            if step.training:
                step.saved[(m, c)] = (x, out)
        elif step.compute_loss:
            loss = self._loss(out, step.micro[m][1])
            if step.training:
                step.saved[(m, c)] = (x, loss)
        else:
            step.outputs.append(out)

    def _loss(self, output, label):
        """Every loss_fn on the micro-batch (recorded, divided by accumulate_steps); returns loss_fn_idx's."""
        chosen = None
        if self.total_loss is None:
            self.total_loss = [[] for _ in self._layers._loss_fn]
        for idx, fn in enumerate(self._layers._loss_fn):
            if fn is None:
                continue
            loss = fn(output, label)
            if not isinstance(loss, oarlock.Tensor):
                raise TypeError(f"{type(self).__name__}: loss_fn[{idx}] returned a {type(loss).__name__}; it must "
                                "return a Tensor")
            if self.accumulate_steps > 1:
                loss = loss / self.accumulate_steps
            self.total_loss[idx].append(loss.detach())
            if idx == self.loss_fn_idx:
                chosen = loss
        return chosen

    def _backward_action(self, action, step: _Step) -> None:
        m, c = action.micro_batch, action.chunk
        v = self._virtual(c)
        if self.num_chunks > 1:
            self.set_virtual_pipeline_rank(c)
        x, out = step.saved.pop((m, c))
        if self._is_last_virtual(c):
            roots, grads = [self.scaler.scale(out) if self.scaler is not None else out], None
        else:
            roots = [t for t in flatten(out, "")[0] if not t.stop_gradient]
            grads = self._p2p.recv_backward(v, m)
        inputs = [t for t in flatten(x, "")[0] if not t.stop_gradient] if v > 0 else []
        if (m, c) in step.deferred_w:
            step.pending_w[(m, c)] = (roots, grads)
            got = oarlock.autograd.grad(roots, inputs, grads, retain_graph=True, allow_unused=True) \
                if roots and inputs else [None] * len(inputs)
        else:
            if roots:
                oarlock.autograd.backward(roots, grads)
            got = [t.grad for t in inputs]
        if v > 0:
            self._p2p.send_backward([g if g is not None else oarlock.zeros_like(t) for g, t in zip(got, inputs)], v)

    def _offload_action(self, action, step: _Step) -> None:
        """"O": this micro-batch's saved activations to the host pool (pipeline_swap, schedule 1F1BOffload)."""
        step.swap.offload((action.micro_batch, action.chunk))

    def _load_action(self, action, step: _Step) -> None:
        """"L": them back to the device, before the backward that reads them."""
        step.swap.load((action.micro_batch, action.chunk))

    def _weight_action(self, action, step: _Step) -> None:
        roots, grads = step.pending_w.pop((action.micro_batch, action.chunk), ([], None))
        if roots:
            oarlock.autograd.backward(roots, grads)

    # -- after the schedule ----------------------------------------------------------------------------------
    def _broadcast_final_loss(self, return_micro_batch_loss=False):
        """The loss of each loss_fn from the last stage to every stage of the pipe group (Paddle's
        _broadcast_final_loss; its dtype travels first)."""
        last = self.num_stages - 1
        src = self._hcg.get_rank_from_stage(last)
        losses = []
        for idx, fn in enumerate(self._layers._loss_fn):
            if fn is None:
                continue
            if self.stage_id == last:
                parts = self.total_loss[idx]
                loss = oarlock.stack(parts) if return_micro_batch_loss else oarlock.add_n(parts)
                meta = [_LOSS_DTYPES.index(loss.dtype.name), *loss.shape]
            else:
                loss, meta = None, None
            if self.num_stages > 1:
                shared = [meta]
                dist.broadcast_object_list(shared, src=src, group=self.pp_group)
                if loss is None:
                    loss = oarlock.zeros(shared[0][1:], dtype=_LOSS_DTYPES[shared[0][0]])
                dist.broadcast(loss, src=src, group=self.pp_group)
            losses.append(loss)
        return losses[0] if len(losses) == 1 else losses

    def _optimizer_step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.clear_grad()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()


class PipelineParallelWithInterleave(PipelineParallel):
    """PipelineParallel over a PipelineLayer with num_virtual_pipeline_stages > 1 (interleaved schedules)."""

    def __init__(self, layers, hcg, strategy):
        if isinstance(layers, PipelineLayer) and layers.get_num_virtual_stages() < 2:
            raise ValueError("PipelineParallelWithInterleave(): the PipelineLayer has no virtual stages "
                             "(num_virtual_pipeline_stages < 2); use PipelineParallel")
        super().__init__(layers, hcg, strategy)


def wrap_model(strategy, model, hcg, user_strategy):
    """The pipeline step of fleet.distributed_model: PipelineParallelWithInterleave when the PipelineLayer has
    virtual stages, else PipelineParallel."""
    if isinstance(model, PipelineLayer) and model.get_num_virtual_stages() > 1:
        return PipelineParallelWithInterleave(model, hcg, user_strategy)
    return PipelineParallel(model, hcg, user_strategy)


def wrap_optimizer(strategy, optimizer, hcg, user_strategy):
    """The pipeline step of fleet.distributed_optimizer: the optimizer as it is (HybridParallelOptimizer, which
    fleet wraps around every strategy's optimizer, clips over the stages and averages over data parallel)."""
    return optimizer
