"""torch.optim: the Optimizer base class (optimizer), SGD / Adam / AdamW (algorithms), lr_scheduler."""

from oarlock_torch_proxy.facade.optim import lr_scheduler, optimizer
from oarlock_torch_proxy.facade.optim.algorithms import SGD, Adam, AdamW
from oarlock_torch_proxy.facade.optim.optimizer import Optimizer
from oarlock_torch_proxy.missing import missing_getattr

__getattr__ = missing_getattr("torch.optim")
__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler", "optimizer"]
