"""SDCMonitor's cost per training step on the GPT of `oarlock train` (the SDC half of issue 22's
bench/resilience.py): the same model and optimizer step with the monitor on and off, blocks of steps
alternating (off, on, off, on, ...) so that drift of the machine hits both alike; prints the median ms/step
of each and the overhead (on / off - 1; the goal is under 2% at the default interval). On a shared machine that
ratio is noisy, so it also prints the time spent inside the monitor's own step hooks (before and after the
optimizer's update, its collectives included) per step, as a share of the unmonitored step: the same cost,
measured without the noise of everything else in the step.

The GPT: byte vocab 256, width 128, 4 layers, 4 heads, seq 128, batch 16 per rank, AdamW (bench/train_step.py's).
Run it in one process (a group of one: fingerprints, the self-check and the guards, no all-gather), or under
`oarlock launch -n 2` for data parallelism (oarlock.DataParallel; adds the all-gather of the fingerprints).
--replay-interval N adds the replay check every N steps (off by default, as in SDCMonitor); --loss-fn adds the
own-batch replay to it (the GPT's loss as SDCMonitor's loss_fn).

    python bench/resilience_sdc.py [--interval 1] [--replay-interval 0] [--loss-fn] [--blocks 6] [--steps 4] [--small]
    python -m oarlock.cli launch -n 2 bench/resilience_sdc.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import oarlock
import oarlock.distributed as dist

GPT = dict(vocab=256, width=128, layers=4, heads=4, seq=128, batch=16)
SMALL = dict(vocab=64, width=32, layers=2, heads=4, seq=32, batch=4)   # --small: a smoke run


def build(sizes: dict, data_parallel: bool):
    from oarlock_train.model import GPT as Model, GPTConfig
    oarlock.seed(0)
    model = Model(GPTConfig(vocab_size=sizes["vocab"], width=sizes["width"], layers=sizes["layers"],
                            heads=sizes["heads"], max_seq_len=sizes["seq"]))
    forward = oarlock.DataParallel(model) if data_parallel else model
    opt = oarlock.optimizer.AdamW(learning_rate=1e-3, parameters=forward.parameters(), weight_decay=0.01)
    rows = np.random.default_rng(1 + (dist.get_rank() if data_parallel else 0)).integers(
        0, sizes["vocab"], (sizes["batch"], sizes["seq"] + 1))
    rows = oarlock.to_tensor(rows)
    return model, forward, opt, rows


def timed_block(model, forward, opt, rows, steps: int, monitor) -> float:
    """Seconds per step over `steps` steps."""
    if data_parallel_size() > 1:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        loss = model.loss(rows, forward=forward)
        loss.backward()
        if monitor is not None:
            monitor.record_loss(loss, rows)
        opt.step()
        opt.clear_grad()
    return (time.perf_counter() - start) / steps


def clock_hooks(monitor, spent: list):
    """Adds the seconds each of the monitor's step hooks takes to spent[0]."""
    for name in ("_before_step", "_after_step"):
        hook = getattr(monitor, name)

        def timed(hook=hook):
            start = time.perf_counter()
            try:
                hook()
            finally:
                spent[0] += time.perf_counter() - start
        setattr(monitor, name, timed)


def data_parallel_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=int, default=1)
    parser.add_argument("--replay-interval", type=int, default=0)
    parser.add_argument("--blocks", type=int, default=6, help="blocks of each kind (on and off)")
    parser.add_argument("--steps", type=int, default=4, help="steps per block")
    parser.add_argument("--loss-fn", action="store_true", help="the own-batch replay too (needs --replay-interval)")
    parser.add_argument("--small", action="store_true", help="a tiny GPT (smoke run)")
    args = parser.parse_args()
    from oarlock.distributed.resilience import SDCMonitor
    launched = dist.get_world_size() > 1   # under `oarlock launch`: the world is known before init
    if launched:
        dist.init_parallel_env()
    sizes = SMALL if args.small else GPT
    model, forward, opt, rows = build(sizes, launched)
    timed_block(model, forward, opt, rows, 2, None)   # warm-up: the optimizer state is made
    off, on, spent = [], [], [0.0]
    for _ in range(args.blocks):
        off.append(timed_block(model, forward, opt, rows, args.steps, None))
        loss_fn = (lambda fwd, batch: model.loss(batch, forward=fwd)) if args.loss_fn else None
        monitor = SDCMonitor(forward, opt, interval=args.interval, replay_interval=args.replay_interval,
                             loss_fn=loss_fn)
        clock_hooks(monitor, spent)
        on.append(timed_block(model, forward, opt, rows, args.steps, monitor))
        monitor.close()
    if dist.is_initialized() and dist.get_rank() != 0:
        return
    off_ms, on_ms = statistics.median(off) * 1e3, statistics.median(on) * 1e3
    hooks_ms = spent[0] / (args.blocks * args.steps) * 1e3
    replay = f"every {args.replay_interval}" if args.replay_interval else "never"
    replay += " (with own batch)" if args.loss_fn and args.replay_interval else ""
    print(f"SDCMonitor overhead, GPT {sizes} x {data_parallel_size()} rank(s), interval {args.interval}, "
          f"replay {replay}: off {off_ms:.2f} ms/step, on {on_ms:.2f} ms/step, "
          f"ratio {on_ms / off_ms:.4f} ({(on_ms / off_ms - 1) * 100:+.2f}%); inside the monitor "
          f"{hooks_ms:.2f} ms/step = {hooks_ms / off_ms * 100:.2f}% of the unmonitored step")


if __name__ == "__main__":
    main()
