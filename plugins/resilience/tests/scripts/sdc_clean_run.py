"""The long false-positive run of SDCMonitor (not part of the test suite; its figures are in the README):
data-parallel training of sdc_job's small MLP (dropout, AdamW) for STEPS steps on every rank of the job with every
check on (fingerprints after each step, the between-step self-check, every 20 steps the shared replay and the
own-batch replay against the training gradients, the loss guards; dropout on), then the same training without a
monitor. Prints, on rank 0, whether any check fired and whether the final weights are bit-identical to the
unmonitored run's; exits 1 otherwise.

    python -m oarlock.cli launch -n 2 plugins/resilience/tests/scripts/sdc_clean_run.py [STEPS]   (default 2000)

The suite runs a 200-step version of the same scenario (tests/test_sdc_mpi.py, scenario "clean").
"""

from __future__ import annotations

import sys
import time

from mpi4py import MPI

import oarlock.distributed as dist
from sdc_job import scenario_clean


def main(steps: int) -> int:
    dist.init_parallel_env()
    start = time.perf_counter()
    result = scenario_clean(steps)
    results = MPI.COMM_WORLD.gather(result, root=0)
    if MPI.COMM_WORLD.rank != 0:
        return 0
    clean = all(r == {"error": None, "steps": steps, "equal_to_unmonitored": True} for r in results)
    print(f"SDCMonitor clean run: {steps} steps x {len(results)} ranks, interval 1, both replays every 20 steps: "
          f"{'no detection, final weights bit-identical to the unmonitored run' if clean else results} "
          f"({time.perf_counter() - start:.0f} s for both runs)")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
