"""oarlock: a plugin-based deep-learning framework with PaddlePaddle's API.

The core holds Tensor, dtypes, devices, the dispatcher, autograd and the
plugin hooks. Everything else (backends, ops, layers, and every namespace
such as oarlock.nn) comes from plugins, loaded on first use: `import oarlock`
imports no plugin.
"""

from oarlock import _namespace, autograd, device, distributed
from oarlock._tensor import Tensor, from_dlpack
from oarlock.autograd import (PyLayer, enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled)
from oarlock.device import (CPUPlace, CUDAPlace, CustomPlace, Place, get_device, is_compiled_with_cuda,
                            set_device)
from oarlock.dtypes import (DType, bfloat16, bool, complex64, complex128, float8_e4m3fn, float8_e5m2,
                            float16, float32, float64, get_default_dtype, int8, int16, int32, int64,
                            set_default_dtype, uint8)
from oarlock.hookspecs import hookimpl
from oarlock.random import get_rng_state, seed, set_rng_state
from oarlock.serialization import load, save

__version__ = "0.1.0"
dtype = DType

# Everything else (oarlock.add, oarlock.nn, oarlock.incubate.nn.functional, ...) is what plugins export,
# resolved on first use; namespaces with no file are served by the finder (oarlock/_namespace.py).
__getattr__, __dir__ = _namespace.lazy_namespace(__name__, globals())
_namespace.install_finder()
