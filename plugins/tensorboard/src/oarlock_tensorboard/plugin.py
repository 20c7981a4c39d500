"""Entry point of oarlock-tensorboard ("tensorboard"): export SummaryWriter into oarlock.utils.tensorboard."""

from oarlock import hookimpl

import oarlock_tensorboard


@hookimpl
def oarlock_register_api(api):
    oarlock_tensorboard.register_api(api)
