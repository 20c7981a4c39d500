"""Run a Python script with the torch proxy on everywhere (scope=None): `python run_with_proxy.py SCRIPT ARGS`."""

import runpy
import sys

from oarlock.compat import enable_torch_proxy

if __name__ == "__main__":
    enable_torch_proxy()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
