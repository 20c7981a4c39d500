"""The PaddleFormers LLM tests: their helpers (pf_install, pf_models) are importable from this directory."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
