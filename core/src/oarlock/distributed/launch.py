"""`python -m oarlock.distributed.launch -n N script.py ...`: the same as `oarlock launch`.

The launcher itself comes from a plugin (oarlock-xccl registers the `launch`
command); this module only forwards to it, so the core stays free of MPI.
"""

import sys

from oarlock.cli import main

if __name__ == "__main__":
    sys.exit(main(["launch", *sys.argv[1:]]))
