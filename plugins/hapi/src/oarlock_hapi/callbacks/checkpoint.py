"""ModelCheckpoint: save the model every `save_freq` epochs to `save_dir/{epoch}` and at the end of training to
`save_dir/final` (.pdparams, and .pdopt when the optimizer has state), on local rank 0, as Paddle does."""

from __future__ import annotations

import os

from oarlock_hapi.callbacks.base import Callback
from oarlock_hapi.ranks import local_rank


class ModelCheckpoint(Callback):
    """Saves checkpoints during fit; does nothing when `save_dir` is None."""

    def __init__(self, save_freq=1, save_dir=None):
        super().__init__()
        if not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1:
            raise ValueError(f"ModelCheckpoint(): argument 'save_freq' must be an int >= 1, got {save_freq!r}")
        self.save_freq = save_freq
        self.save_dir = save_dir

    def on_epoch_begin(self, epoch=None, logs=None):
        self.epoch = epoch

    def _is_save(self):
        return self.model is not None and bool(self.save_dir) and local_rank() == 0

    def _save(self, name):
        path = f"{self.save_dir}/{name}"
        print(f"save checkpoint at {os.path.abspath(path)}")
        self.model.save(path)

    def on_epoch_end(self, epoch, logs=None):
        if self._is_save() and self.epoch % self.save_freq == 0:
            self._save(epoch)

    def on_train_end(self, logs=None):
        if self._is_save():
            self._save("final")
