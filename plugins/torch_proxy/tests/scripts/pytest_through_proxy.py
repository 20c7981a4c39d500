"""Run a library's own pytest suite with the torch proxy on: `python pytest_through_proxy.py SCOPE -- PYTEST
ARGS`. SCOPE is a comma-separated list of top-level modules, or "*" for everywhere (then `sys.modules["torch"]`
is the façade too, which libraries that probe sys.modules for torch need). The exit status is pytest's."""

import sys

from oarlock.compat import enable_torch_proxy

if __name__ == "__main__":
    scope_arg, _, pytest_args = sys.argv[1], sys.argv[2], sys.argv[3:]
    enable_torch_proxy(scope=None if scope_arg == "*" else set(scope_arg.split(",")))
    import pytest

    sys.exit(pytest.main(pytest_args))
