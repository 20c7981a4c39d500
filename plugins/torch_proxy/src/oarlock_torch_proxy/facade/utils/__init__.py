"""torch.utils: data (datasets, samplers, DataLoader) and checkpoint."""

from oarlock_torch_proxy.facade.utils import checkpoint, data
from oarlock_torch_proxy.missing import missing_getattr

__getattr__ = missing_getattr("torch.utils")
_ = (checkpoint, data)
