"""Issue 22's fault-tolerance benchmark: the cost of the silent-data-corruption monitor per training step and the
time lost per failure, each from its own script run here in turn (each in its own processes):

1. bench/resilience_sdc.py in one process and under `oarlock launch -n 2` (data parallel): SDCMonitor's cost per
   step of the `oarlock train` GPT at the default interval (goal: under 2%), as the on/off step-time ratio and as
   the time inside the monitor's hooks;
2. bench/resilience_restart.py --delete-dir: one rank of a 2-rank elastic job SIGKILLed after a step, its
   checkpoint directory deleted: restart + restore (from the buddy's replica) + recomputed steps.

    python bench/resilience.py [--quick]      (--quick: a tiny GPT and a short job, a smoke run)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(title: str, argv: list[str]) -> int:
    print(f"\n== {title}\n$ {' '.join(argv)}", flush=True)
    return subprocess.run(argv).returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny GPT and a short elastic job (smoke run)")
    args = parser.parse_args(argv)
    sdc = [os.path.join(HERE, "resilience_sdc.py")] + (["--small", "--blocks", "2", "--steps", "2"] if args.quick
                                                        else [])
    restart = [os.path.join(HERE, "resilience_restart.py"), "--delete-dir"] + (
        ["--steps", "20", "--every", "5", "--kill-step", "12", "--hidden", "64"] if args.quick else [])
    failures = [run("SDC monitor, one process", [sys.executable, *sdc]),
                run("SDC monitor, 2 data-parallel ranks", [sys.executable, "-m", "oarlock.cli", "launch", "-n", "2",
                                                           *sdc]),
                run("time lost per failure, 2 ranks", [sys.executable, *restart])]
    return max(failures)


if __name__ == "__main__":
    sys.exit(main())
