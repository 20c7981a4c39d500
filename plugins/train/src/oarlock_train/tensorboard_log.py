"""`oarlock train --log-dir DIR`: the run's scalars as TensorBoard event files (view: tensorboard --logdir DIR).

Tags, all against the step number:
    train/loss            loss of each step (nats per byte)
    train/lr              the learning rate that step used
    train/tokens_per_s    tokens of the step / the step's wall time (forward, backward, optimizer update)
    train/grad_norm       global L2 norm of the gradients before clipping (the norm ClipGradByGlobalNorm clips)
    train/aux_loss        with --moe-experts: the gates' aux (load-balancing) loss of each step, before its weight
    val/loss              validation loss, at each evaluation
    memory/allocated_mib, memory/max_allocated_mib   oarlock.device.memory_allocated() and its peak, in MiB
and the run's options as text under config. Without --log-dir, none of this (the gradient norm included)
is computed.
"""

from __future__ import annotations

import dataclasses
import json
import time

import oarlock

MIB = 2 ** 20


class TensorBoardLog:
    """Writes the scalars of each step and evaluation; a resumed run hides the events an earlier run
    logged after the checkpoint's step (purge_step), so the charts show one continuous run."""

    def __init__(self, log_dir: str, trainer, resumed: bool):
        from oarlock.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir, purge_step=trainer.step + 1 if resumed else None)
        self.trainer = trainer
        trainer.measure_grad_norm = True
        self._lr = self._t0 = None
        if not resumed:
            options = json.dumps(dataclasses.asdict(trainer.cfg), indent=2)
            self.writer.add_text("config", f"```\n{options}\n```", 0)

    def step_started(self) -> None:
        self._lr = self.trainer.optimizer.get_lr()  # the scheduler moves on inside the step
        self._t0 = time.perf_counter()

    def step_finished(self, loss: float) -> None:
        seconds = time.perf_counter() - self._t0
        trainer, add = self.trainer, self.writer.add_scalar
        step = trainer.step
        add("train/loss", loss, step)
        add("train/lr", self._lr, step)
        add("train/tokens_per_s", trainer.tokens_per_step / seconds, step)
        if trainer.grad_norm is not None:  # not measured under --mp, --sharding or --ep (see parallel.py)
            add("train/grad_norm", trainer.grad_norm, step)
        if len(trainer.history.aux) == len(trainer.history.train):   # a MoE run's step
            add("train/aux_loss", trainer.history.aux[-1], step)
        add("memory/allocated_mib", oarlock.device.memory_allocated() / MIB, step)
        add("memory/max_allocated_mib", oarlock.device.max_memory_allocated() / MIB, step)

    def evaluated(self, loss: float) -> None:
        self.writer.add_scalar("val/loss", loss, self.trainer.step)
        self.writer.flush()  # evaluations are rare: let TensorBoard show the curve up to here

    def close(self) -> None:
        self.writer.close()
