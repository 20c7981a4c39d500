"""torch.utils: data (datasets, samplers, DataLoader) and checkpoint."""

from oarlock_torch_proxy.facade.utils import _pytree, checkpoint, data
from oarlock_torch_proxy.missing import missing_getattr

__getattr__ = missing_getattr("torch.utils")
_ = (_pytree, checkpoint, data)
