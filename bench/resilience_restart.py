"""Time lost per failure with `oarlock launch --max-restarts` and oarlock.distributed.resilience.

Runs plugins/resilience/tests/scripts/elastic_job.py (a data-parallel MLP that checkpoints every --every
steps) twice on N ranks: uninterrupted, and with one rank SIGKILLing itself after step --kill-step (with
--delete-dir its checkpoint directory is deleted first, so the restart reads the buddy's replica). The
time lost is the difference of the two wall times, split into

  restart     the launcher stopping the job and starting every rank again (process and MPI start-up)
  restore     resilience.resume() in the restarted job: finding, verifying, rebuilding and loading
  recompute   the steps between the restored checkpoint and the kill, trained again

    python bench/resilience_restart.py [--ranks 2] [--steps 60] [--every 10] [--kill-step 35] [--hidden 512]
                                       [--delete-dir] [--repeat 1]

Also prints the median step and save times (save: FlexCheckpoint write, SHA-256 manifest, posting the
replica). Figures from a shared or busy machine are noisy; give them with the machine's description.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "plugins" / "resilience" / "tests" / "scripts" / "elastic_job.py"


def run(ranks: int, args, tmp: Path, name: str, kill: bool) -> tuple[float, dict]:
    ckpt, out = tmp / f"{name}_ckpt", tmp / name
    extra = ["--kill-step", str(args.kill_step), "--kill-rank", str(ranks - 1)] if kill else []
    if kill and args.delete_dir:
        extra.append("--delete-dir")
    command = [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), "--grace", "0.5",
               "--max-restarts", "1", str(JOB), "--ckpt", str(ckpt), "--out", str(out), "--steps", str(args.steps),
               "--every", str(args.every), "--hidden", str(args.hidden), *extra]
    store = Path("/dev/shm") / f"oarlock-bench-{os.getpid()}" if os.path.isdir("/dev/shm") else tmp / "shm"
    env = dict(os.environ, OARLOCK_REPLICA_DIR=str(store))
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, json.loads((out / "report.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--kill-step", type=int, default=35)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--delete-dir", action="store_true", help="also lose the killed rank's checkpoint directory")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for _ in range(args.repeat):
        tmp = Path(tempfile.mkdtemp(prefix="oarlock-bench-restart-"))
        try:
            clean_s, clean = run(args.ranks, args, tmp, "clean", kill=False)
            killed_s, killed = run(args.ranks, args, tmp, "killed", kill=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        recomputed = args.kill_step - killed["resumed_at"]
        recompute_s = recomputed * clean["step_s"]
        lost = killed_s - clean_s
        rows.append((lost, killed["resume_s"], recompute_s, recomputed, clean["step_s"], clean["save_s"],
                     len(killed["restore"]["rebuilt"])))
    print(f"{args.ranks} ranks, {args.steps} steps, checkpoint every {args.every}, kill after step {args.kill_step}, "
          f"hidden {args.hidden}{', checkpoint directory lost' if args.delete_dir else ''}")
    print(f"{'lost s':>8} {'restore s':>10} {'recompute s':>12} {'steps redone':>13} {'restart s':>10} "
          f"{'step ms':>8} {'save ms':>8} {'files rebuilt':>14}")
    for lost, restore_s, recompute_s, redone, step_s, save_s, rebuilt in rows:
        print(f"{lost:8.2f} {restore_s:10.3f} {recompute_s:12.3f} {redone:13d} {lost - restore_s - recompute_s:10.2f} "
              f"{step_s * 1e3:8.2f} {save_s * 1e3:8.2f} {rebuilt:14d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
