"""Optimizers, gradient clipping and learning-rate schedulers (Paddle's oarlock.optimizer API).

- optimizer: the Optimizer base (parameter groups, learning rate, state, state_dict, clear_grad)
- sgd, adam, adagrad, rmsprop, lamb: one module per optimizer family
- clip: ClipGradByGlobalNorm/ByNorm/ByValue and nn.utils.clip_grad_norm_/clip_grad_value_
- lr: the LR schedulers of oarlock.optimizer.lr

Every step and clip runs on the fused in-place update ops (adam_step_, global_norm, ...), which are an op
family of oarlock-ops (oarlock_ops.optimizer_update, plugin "optimizer_update"): this package defines no
op and registers no kernel; it calls the ops through the public namespaces.
"""

from oarlock_nn.optim import adagrad, adam, clip, lamb, lr, optimizer, rmsprop, sgd

EXPORTS = {
    "oarlock.optimizer": [optimizer.Optimizer, sgd.SGD, sgd.Momentum, adam.Adam, adam.AdamW, adagrad.Adagrad,
                          rmsprop.RMSProp, lamb.Lamb],
    "oarlock.optimizer.lr": list(lr.SCHEDULERS),
    "oarlock.nn": [clip.ClipGradBase, clip.ClipGradByGlobalNorm, clip.ClipGradByNorm, clip.ClipGradByValue],
    "oarlock.nn.utils": [clip.clip_grad_norm_, clip.clip_grad_value_],
}


def register_api(api):
    for namespace, objects in EXPORTS.items():
        for obj in objects:
            api.export(namespace, obj.__name__, obj)
