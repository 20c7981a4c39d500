"""Central finite differences in float64: the gradient oracle the tests share."""

import numpy as np


def numeric_grad(fn, arrays, weights, eps=1e-6):
    """Central differences of sum(fn(*arrays) * weights) with respect to each array (changed and restored
    in place, so pass copies you own)."""
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            saved = a[idx]
            a[idx] = saved + eps
            up = np.sum(fn(*arrays) * weights)
            a[idx] = saved - eps
            down = np.sum(fn(*arrays) * weights)
            a[idx] = saved
            g[idx] = (up - down) / (2 * eps)
        grads.append(g)
    return grads
