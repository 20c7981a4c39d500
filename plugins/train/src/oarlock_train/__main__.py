"""`python -m oarlock_train` is `oarlock train`."""

import sys

from oarlock_train.command import main

sys.exit(main())
