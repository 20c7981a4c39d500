"""One rank of `oarlock train --nproc N`: started by `oarlock launch` with the command's options (see parallel)."""

import sys

from oarlock_train.command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], launched=True))
