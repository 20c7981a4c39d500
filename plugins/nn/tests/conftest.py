"""The workspace's shared test helpers on sys.path for the oarlock-nn tests: the op table's float64
references (`op_specs.optim`, which the optimizer tests reuse for the update ops of the
"optimizer_update" family) and `errors.raises_naming`. The oracle fixtures (`torch`, `paddle`) come
from the workspace's root conftest.py."""

from __future__ import annotations

import os
import sys

_SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir, "tests")
sys.path.insert(0, os.path.normpath(_SHARED))
