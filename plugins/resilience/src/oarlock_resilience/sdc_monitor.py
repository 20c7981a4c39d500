"""SDCMonitor: online silent-data-corruption checks of a data-parallel training job.

    monitor = SDCMonitor(model, optimizer, interval=1, replay_interval=100, loss_fn=loss_fn)
    for batch in data:
        loss = loss_fn(model, batch); loss.backward()
        monitor.record_loss(loss, batch)   # optional: the loss guards (and, with loss_fn, the own-batch replay)
        optimizer.step()                   # the monitor checks after every interval-th step
        optimizer.clear_grad()

Given the optimizer, the monitor wraps that optimizer instance's step() (the instance attribute; close()
removes it). Every check is collective over `group` (default: fleet's data-parallel group after fleet.init(),
else the world; one process without init_parallel_env() is a group of one) and every rank of the group must hold
a replica of the same parameters. The parameters checked are the trainable ones (stop_gradient False): the
others include BatchNorm's running statistics, which data-parallel ranks keep apart by design. What it checks,
after the `interval`-th step (see sdc_verdict for the order):

- fingerprints of every parameter, all-gathered: replicas must be bit-identical, so the ranks outside the
  majority are named with the first parameter that differs ("replica_mismatch");
- before the step after a checked one, the rank's parameters against their fingerprints at that check: they may
  change only in a step, so a difference is memory corruption on that rank ("changed_between_steps");
- inf/nan in gradients and parameters, and the loss given to record_loss(): inf/nan, or a spike above
  median + spike_threshold * MAD of the last loss_window losses;
- every replay_interval steps (0: never) and on replay(): the last micro-batch the model saw (its forward's
  positional arguments, taken from the group's first rank so that all ranks replay the same one) runs forward
  and backward `replays` times on every rank (eval mode, no all-reduce, a fixed random projection of the output
  as the loss unless replay_fn(model, *inputs) -> loss is given); a rank whose own replays differ names itself,
  and the ranks' gradients must agree (with two ranks a known-answer matmul test decides which one is wrong);
- with loss_fn(model, batch) -> loss (the training loss of one micro-batch) and the batch given to
  record_loss(loss, batch), the replay steps also replay each rank's own micro-batch just before the update,
  with the parameters, modes and random state its training forward had, and compare its gradients with the
  ones the training backward computed (captured by gradient hooks armed for that step only): a fault that
  struck the training compute of a rank and was gone by the replay names that rank. With gradient
  accumulation, pass the last micro-batch; under a GradScaler, loss_fn returns the scaled loss.

On detection (on_detect): "raise" raises SilentDataCorruptionError on every rank of the group. "rollback" restores
the in-memory snapshot of the last step that passed every check of that step (parameters and optimizer state; one
copy of each is kept, refreshed at every clean checked step; a replay failure thus goes back before the step whose
gradients it distrusts) and then excludes the named ranks' replicas: every parameter is broadcast from the first
rank of the group that was not named, so a corrupt replica is overwritten by a good one. The steps since the
snapshot are lost (the data loop goes on with the next batch) and the error is appended to `detections`. A rank
named more than max_strikes times is reported by raising kind "repeated": a process cannot be removed from a
running MPI job, so the job should end there and be restarted without that node (`oarlock launch --min-nproc`).
A callable on_detect(error) is called instead, after which the next check starts from a fresh baseline; to go
back to a FlexCheckpoint on disk:

    def reload(error):
        state = {"model": model.state_dict(), "opt": optimizer.state_dict()}
        oarlock.distributed.load_state_dict(state, path)      # what save_state_dict(state, path) wrote
        optimizer.set_state_dict(state["opt"])
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np

import oarlock
from oarlock_resilience import sdc_inject
from oarlock_resilience.sdc_errors import SilentDataCorruptionError
from oarlock_resilience.sdc_fingerprint import fingerprints
from oarlock_resilience.sdc_guards import LossSpikeGuard, first_nonfinite
from oarlock_resilience.sdc_snapshot import Snapshot
from oarlock_resilience.sdc_replay import (TrainingGradients, gradient_fingerprints, known_answer_ok, own_batch_loss,
                                           shared_batch_loss)
from oarlock_resilience.sdc_verdict import pack_step, replay_verdict, step_verdict
from oarlock_xccl import api as dist

ENV = "OARLOCK_SDC_CHECK"
_WHAT = "SDCMonitor"


def _positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{_WHAT}(): {name} must be an int >= {minimum}, got {value!r}")
    return value


def _default_group():
    """fleet's data-parallel group after fleet.init(), else the world; None without init_parallel_env()."""
    if not dist.is_initialized():
        return None
    try:
        return oarlock.distributed.fleet.get_hybrid_communicate_group().get_data_parallel_group()
    except (AttributeError, RuntimeError):   # no oarlock-parallel, or fleet.init() not called
        return dist.get_group(0)


class SDCMonitor:
    """See the module docstring. All checks are collective: every rank of the group runs the same steps."""

    def __init__(self, model, optimizer=None, group=None, interval=1, *, replay_interval=0, replay_fn=None,
                 loss_fn=None, replays=2, loss_window=50, spike_threshold=10.0, on_detect="raise", max_strikes=3):
        if not isinstance(model, oarlock.nn.Layer):
            raise TypeError(f"{_WHAT}(): model must be an oarlock.nn.Layer, got {type(model).__name__}")
        if optimizer is not None and not callable(getattr(optimizer, "step", None)):
            raise TypeError(f"{_WHAT}(): optimizer must have a step() method, got {type(optimizer).__name__}")
        if group is not None and not hasattr(group, "ranks"):
            raise TypeError(f"{_WHAT}(): group must be a Group (new_group(), fleet's groups) or None, got "
                            f"{type(group).__name__}")
        if not (on_detect in ("raise", "rollback") or callable(on_detect)):
            raise ValueError(f"{_WHAT}(): on_detect must be 'raise', 'rollback' or a callable, got {on_detect!r}")
        if replay_fn is not None and not callable(replay_fn):
            raise TypeError(f"{_WHAT}(): replay_fn must be callable(model, *inputs) -> loss, got {replay_fn!r}")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"{_WHAT}(): loss_fn must be callable(model, batch) -> loss, got {loss_fn!r}")
        if isinstance(spike_threshold, bool) or not isinstance(spike_threshold, (int, float)) or spike_threshold <= 0:
            raise ValueError(f"{_WHAT}(): spike_threshold must be a number > 0, got {spike_threshold!r}")
        self.interval = _positive_int("interval", interval)
        self.replay_interval = _positive_int("replay_interval", replay_interval, 0)
        self.replays = _positive_int("replays", replays)
        self.max_strikes = _positive_int("max_strikes", max_strikes, 0)
        self.model, self.optimizer, self.replay_fn, self.on_detect = model, optimizer, replay_fn, on_detect
        named = [(name, p) for name, p in model.named_parameters() if not p.stop_gradient]
        if not named:
            raise ValueError(f"{_WHAT}(): the model has no trainable parameters to check")
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.group = group if group is not None else _default_group()
        self.ranks = list(self.group.ranks) if self.group is not None else [0]
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        if self.rank not in self.ranks:
            raise ValueError(f"{_WHAT}(): this process (global rank {self.rank}) is not a member of the group "
                             f"{self.ranks}; make the monitor only on the group's ranks")
        self.step = 0                 # optimizer steps completed while monitored
        self.detections: list = []    # errors rolled back (on_detect="rollback")
        self.strikes: Counter = Counter()
        self.loss_guard = LossSpikeGuard(_positive_int("loss_window", loss_window, 2), float(spike_threshold))
        self._baseline = None         # (step, fingerprints) of the last clean check
        self._changed = -1            # the parameter found changed between steps, until the next check
        self._loss = None
        self._inputs = None           # the forward arguments of the model's last call (for replay)
        self.loss_fn, self._batch, self._own_diff = loss_fn, None, -1
        self._training_grads = TrainingGradients(self.params) if loss_fn is not None else None
        self._replaying = False
        self._snapshot = None
        self._faults = sdc_inject.pending_faults()
        self._armed = None
        for fault in self._faults:
            if fault.kind == "bitflip" and fault.param not in self.names:
                raise ValueError(f"{_WHAT}(): fault injection names parameter {fault.param!r}; the model has "
                                 f"{self.names}")
        self._hook = model.register_forward_pre_hook(self._record_inputs)
        if optimizer is not None:
            self._wrap(optimizer)
        if on_detect == "rollback":
            self._snapshot = Snapshot(self.params, optimizer)
        self._arm(1)

    @classmethod
    def from_env(cls, model, optimizer=None, **kwargs):
        """A monitor when OARLOCK_SDC_CHECK is set (what `oarlock launch --sdc-check` sets), else None.
        Its value: "1", or settings such as "interval=2,replay_interval=100" (ints), which override kwargs."""
        text = os.environ.get(ENV, "").strip()
        if text in ("", "0"):
            return None
        if text != "1":
            for item in filter(None, text.split(",")):
                key, sep, value = item.partition("=")
                if not sep or key.strip() not in ("interval", "replay_interval", "replays", "max_strikes") \
                        or not value.strip().isdigit():
                    raise ValueError(f"{ENV}: expected 1 or key=int pairs among interval, replay_interval, "
                                     f"replays, max_strikes; got {text!r}")
                kwargs[key.strip()] = int(value)
        return cls(model, optimizer, **kwargs)

    # -- hooks ---------------------------------------------------------------------------------------------------
    def _wrap(self, optimizer):
        inner = optimizer.step

        def step(*args, **kwargs):
            self._before_step()
            out = inner(*args, **kwargs)
            self._after_step()
            return out
        step.__doc__ = inner.__doc__
        optimizer.step = step   # the instance's own attribute: close() deletes it, the class's step shows again

    def _record_inputs(self, layer, inputs):
        if not self._replaying:
            self._inputs = inputs
            if self._training_grads is not None:
                self._training_grads.note_forward()

    def close(self) -> None:
        """Stops monitoring: the forward hook and the optimizer's wrapped step are removed."""
        self._hook.remove()
        if self.optimizer is not None and "step" in vars(self.optimizer):
            del self.optimizer.step
        self._disarm()
        if self._training_grads is not None:
            self._training_grads.disarm()

    # -- the step ------------------------------------------------------------------------------------------------
    def _before_step(self):
        if self._baseline is not None and self._baseline[0] == self.step:
            now = fingerprints(self.params)
            changed = np.flatnonzero(now != self._baseline[1])
            self._changed = int(changed[0]) if changed.size else -1
        if self._training_grads is not None and self._training_grads.armed:
            self._replay_own_batch(*self._training_grads.disarm())

    def _replay_own_batch(self, training: np.ndarray, rng_state):
        """Replays this rank's micro-batch at the parameters the update is about to use; notes the first
        gradient that differs from the training backward's (sent with the replay check after the step)."""
        if self._batch is None or rng_state is None:
            return
        self._replaying = True
        try:
            replayed = gradient_fingerprints(self.model, self.params,
                                             own_batch_loss(self.model, self._batch, self.loss_fn, rng_state),
                                             eval_mode=False)
        finally:
            self._replaying = False
        differs = np.flatnonzero(replayed != training)
        self._own_diff = int(differs[0]) if differs.size else -1

    def _after_step(self):
        self.step += 1
        try:
            checked = self.step % self.interval == 0
            clean = self._step_check() if checked else True
            if clean and self.replay_interval and self.step % self.replay_interval == 0 and self._inputs is not None:
                clean = self._replay_check(self._inputs)
            if checked and clean:   # what a rollback returns to: a state that passed every check of its step
                self._keep_snapshot()
        finally:
            self._disarm()
            self._flip_bits(self.step)
            self._arm(self.step + 1)

    def record_loss(self, loss, batch=None) -> None:
        """The loss of this rank's current step (a Tensor or a number), for the loss guards of the next check;
        batch: what loss_fn(model, batch) needs to compute that loss again (the own-batch replay)."""
        self._loss = float(loss)
        self._batch = batch

    def accept_changes(self) -> None:
        """Call after changing the parameters outside optimizer.step() (loading a checkpoint) on every rank: the
        next check does not count the change as corruption."""
        self._baseline = None

    # -- checks --------------------------------------------------------------------------------------------------
    def check(self) -> None:
        """Runs the step checks now (collective: every rank of the group calls it)."""
        if self._step_check():
            self._keep_snapshot()

    def replay(self, inputs=None) -> None:
        """The replay check now (collective): `inputs`, the positional arguments of one forward of the model
        (default: those of its last forward), replayed on every rank; the group's first rank's are used."""
        inputs = self._inputs if inputs is None else tuple(inputs)
        if inputs is None:
            raise RuntimeError(f"{_WHAT}.replay(): the model has not run forward yet; pass inputs=")
        if self._replay_check(inputs):
            self._keep_snapshot()

    def _step_check(self) -> bool:
        """The step checks; whether they passed (a failure was handled by _detected)."""
        fps = fingerprints(self.params)
        loss_kind, _ = (None, "") if self._loss is None else self.loss_guard.verdict(self._loss)
        packet = pack_step(fps, self._changed, first_nonfinite([p.grad for p in self.params]),
                           first_nonfinite(self.params), loss_kind, self._loss)
        self._changed = -1
        error = step_verdict(self._gather(packet), self.ranks, self.names, self.step)
        if error is not None:
            self._loss = None
            self._detected(error)
            return False
        if self._loss is not None:
            self.loss_guard.accept(self._loss)
            self._loss = None
        self._baseline = (self.step, fps)
        return True

    def _replay_check(self, inputs: tuple) -> bool:
        """The replay check of `inputs`; whether it passed (a failure was handled by _detected)."""
        inputs = self._shared(inputs)
        self._replaying = True
        try:
            loss = shared_batch_loss(self.model, inputs, self.replay_fn)
            runs = [gradient_fingerprints(self.model, self.params, loss) for _ in range(self.replays)]
        finally:
            self._replaying = False
        differs = np.flatnonzero(np.any([run != runs[0] for run in runs], axis=0))
        trailer = [int(differs[0]) if differs.size else -1, self._own_diff]
        self._own_diff = -1
        packet = np.concatenate([runs[0], np.array(trailer, dtype=np.int64)])
        error = replay_verdict(self._gather(packet), self.ranks, self.names, self.step, self._known_answer_vote)
        if error is not None:
            self._detected(error)
        return error is None

    def _known_answer_vote(self, positions: list) -> list:
        """Of the group positions given, those whose rank fails the known-answer matmul (collective)."""
        ok = self._gather(np.array([int(known_answer_ok())], dtype=np.int64))[:, 0]
        return [p for p in positions if not ok[p]]

    # -- communication -------------------------------------------------------------------------------------------
    def _gather(self, packet: np.ndarray) -> np.ndarray:
        """[group size, len(packet)]: every rank's packet, in group order."""
        if self.group is None or len(self.ranks) == 1:
            return packet[None]
        out: list = []
        dist.all_gather(out, oarlock.to_tensor(packet), group=self.group)
        return np.stack([t.numpy() for t in out])

    def _shared(self, inputs: tuple) -> tuple:
        """The group's first rank's inputs, on every rank."""
        if self.group is None or len(self.ranks) == 1:
            return inputs
        host = [(a.numpy(), True) if isinstance(a, oarlock.Tensor) else (a, False) for a in inputs]
        box = [host]
        dist.broadcast_object_list(box, src=self.ranks[0], group=self.group)
        return tuple(oarlock.to_tensor(v) if is_tensor else v for v, is_tensor in box[0])

    # -- detection -----------------------------------------------------------------------------------------------
    def _detected(self, error: SilentDataCorruptionError) -> None:
        if self.on_detect == "raise":
            raise error
        self._baseline = None
        if callable(self.on_detect):
            self.on_detect(error)
            return
        self.strikes.update(error.ranks)
        repeated = sorted(r for r in set(error.ranks) if self.strikes[r] > self.max_strikes)
        if repeated:
            raise SilentDataCorruptionError(error.step, repeated, error.parameter, "repeated",
                                            f"named {dict(self.strikes)} times (max_strikes={self.max_strikes}); "
                                            f"last: {error}")
        self._snapshot.restore()
        good = [r for r in self.ranks if r not in error.ranks]
        if good and len(self.ranks) > 1:
            for p in self.params:   # the excluded replicas are overwritten by the first good one
                dist.broadcast(p, src=good[0], group=self.group)
        self.detections.append(error)
        self._baseline = (self.step, fingerprints(self.params))

    def _keep_snapshot(self):
        if self.on_detect == "rollback":
            self._snapshot = Snapshot(self.params, self.optimizer)

    # -- fault injection (tests only; see sdc_inject) --------------------------------------------------------------
    def _arm(self, step: int):
        """Readies what watches step `step` while it computes: the training-gradient capture on a replay step,
        and the injected faulty matmul of that step."""
        if self._training_grads is not None and self.replay_interval and step % self.replay_interval == 0:
            self._training_grads.arm()
        for fault in self._faults:
            if fault.kind == "matmul" and not fault.fired and (fault.rank, fault.step) == (self.rank, step):
                fault.fired = True
                self._armed = sdc_inject.FaultyMatmul(fault.delta, fault.calls).__enter__()

    def _disarm(self):
        if self._armed is not None:
            self._armed.__exit__(None, None, None)
            self._armed = None

    def _flip_bits(self, step: int):
        for fault in self._faults:
            if fault.kind == "bitflip" and not fault.fired and (fault.rank, fault.step) == (self.rank, step):
                fault.fired = True
                sdc_inject.flip_bit(self.params[self.names.index(fault.param)], fault.bit, fault.index)

