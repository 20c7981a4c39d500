"""Entry point of oarlock-nn ("nn"): export the layers, initializers, optimizers, clipping, LR schedulers
and AMP into their public namespaces (oarlock.nn, oarlock.nn.initializer, oarlock.nn.init, oarlock.nn.utils,
oarlock.optimizer, oarlock.optimizer.lr, oarlock.amp, and the AMP queries at the top level)."""

from oarlock import hookimpl

from oarlock_nn import amp, layers, optim, paddle_paths


@hookimpl
def oarlock_register_api(api):
    for part in (layers, optim, amp, paddle_paths):   # paddle_paths: Paddle's paddle.nn.layer.* module paths
        part.register_api(api)
