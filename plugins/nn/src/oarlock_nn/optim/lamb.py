"""Lamb (layer-wise adaptive moments, You et al. 2019) with Paddle's formula; torch has no Lamb."""

from __future__ import annotations

import oarlock
from oarlock_nn.optim.optimizer import Optimizer, torch_aliases


@torch_aliases(lr="learning_rate", params="parameters", betas=("beta1", "beta2"), eps="epsilon",
               weight_decay="lamb_weight_decay")
class Lamb(Optimizer):
    """m1, m2 as in Adam; r = m1_hat / (sqrt(m2_hat) + epsilon) + lamb_weight_decay * param;
    param -= lr * (||param|| / ||r||) * r.

    As in Paddle's kernel, the trust ratio ||param|| / ||r|| is 1 when either norm is 0, and when the
    parameter's weight decay is 0 unless always_adapt=True. exclude_from_weight_decay_fn(param) -> bool
    turns the decay off for the parameters it selects.
    """

    _accumulators = ("moment1", "moment2")

    def __init__(self, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 parameters=None, grad_clip=None, exclude_from_weight_decay_fn=None, multi_precision=False,
                 always_adapt=False, name=None):
        if exclude_from_weight_decay_fn is not None and not callable(exclude_from_weight_decay_fn):
            raise TypeError(f"Lamb: argument 'exclude_from_weight_decay_fn' must be a function or None, "
                            f"got {type(exclude_from_weight_decay_fn).__name__}")
        super().__init__(learning_rate, parameters, None, grad_clip, name, multi_precision,
                         lamb_weight_decay=lamb_weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
                         always_adapt=always_adapt)
        self._exclude = exclude_from_weight_decay_fn
        self._decays: dict[int, bool] = {}

    def _update(self, param, grad, state, lr, group):
        decays = self._decays.get(id(param))
        if decays is None:
            decays = self._decays[id(param)] = self._exclude is None or not self._exclude(param)
        state["step"] += 1
        oarlock.lamb_step_(param, grad, state["moment1"], state["moment2"], lr, group["beta1"], group["beta2"],
                           group["epsilon"], state["step"], group["lamb_weight_decay"] if decays else 0.0,
                           group["always_adapt"])
