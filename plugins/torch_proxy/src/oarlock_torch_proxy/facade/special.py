"""torch.special: the functions oarlock has under torch's meaning."""

from __future__ import annotations

import oarlock

from oarlock_torch_proxy.missing import missing_getattr

for _name in ("erf", "erfc", "erfinv", "expm1", "exp2", "logit", "sinc", "i0", "log1p", "digamma", "gammaln",
              "logsumexp", "softmax", "round", "xlogy", "entr"):
    if hasattr(oarlock, _name):
        globals()[_name] = getattr(oarlock, _name)


def ndtr(x):
    return 0.5 * (1 + oarlock.erf(x / 2 ** 0.5))


def expit(x):
    return oarlock.sigmoid(x)


__getattr__ = missing_getattr("torch.special")
