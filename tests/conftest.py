"""The op-spec table and the shared test helpers are importable as `op_specs`, `oracles`, `errors`;
the oracle fixtures (`torch`, `paddle`) live in the workspace's root conftest.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
