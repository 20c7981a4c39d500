"""oarlock.callbacks: the hooks oarlock.Model's fit/evaluate/predict call (Paddle 3.2's paddle.callbacks)."""

from oarlock_hapi.callbacks.base import Callback, CallbackList
from oarlock_hapi.callbacks.checkpoint import ModelCheckpoint
from oarlock_hapi.callbacks.config import config_callbacks
from oarlock_hapi.callbacks.early_stopping import EarlyStopping
from oarlock_hapi.callbacks.lr import LRScheduler, ReduceLROnPlateau
from oarlock_hapi.callbacks.progress import ProgBarLogger
from oarlock_hapi.callbacks.visualdl import VisualDL
from oarlock_hapi.callbacks.wandb_logger import WandbCallback

__all__ = ["Callback", "ProgBarLogger", "ModelCheckpoint", "VisualDL", "LRScheduler", "EarlyStopping",
           "ReduceLROnPlateau", "WandbCallback", "CallbackList", "config_callbacks"]
