"""Runs examples/hybrid_gpt.py's main() in every rank of an MPI job and reports what each rank raised.

argv: OUT.json, then the example's arguments. Each rank calls main(arguments) and catches what it raises
(an uncaught exception would abort the whole job at the first failing rank and hide the others); the
"ExceptionType: message" of every rank (None when it returned) travels to rank 0 through raw mpi4py, not
through the code under test, and rank 0 writes the list as JSON. A rank that hangs instead of raising
makes the gather wait: the test's timeout catches it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from mpi4py import MPI

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "hybrid_gpt.py"


def main() -> int:
    out, arguments = sys.argv[1], sys.argv[2:]
    spec = importlib.util.spec_from_file_location("hybrid_gpt", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    try:
        example.main(arguments)
        error = None
    except Exception as exc:   # noqa: BLE001 (every error is the report)
        error = f"{type(exc).__name__}: {exc}"
    errors = MPI.COMM_WORLD.gather(error, root=0)
    if MPI.COMM_WORLD.rank == 0:
        Path(out).write_text(json.dumps(errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
