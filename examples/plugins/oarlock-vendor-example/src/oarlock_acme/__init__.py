"""oarlock-vendor-example: the "acme_npu" device for oarlock, a simulated two-chip accelerator that
reuses every CPU kernel except matmul, relu and softmax, which it implements itself.

Importing this package registers nothing: oarlock loads `oarlock_acme.plugin` through its entry point
the first time a device or an op is used. `CALLS` counts the calls of the three kernels.
"""

from oarlock_acme.kernels import CALLS

__all__ = ["CALLS"]
__version__ = "0.1.0"
