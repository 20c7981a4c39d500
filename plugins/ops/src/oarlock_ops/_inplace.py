"""In-place variants of out-of-place ops (Paddle's `x.exp_()`, `F.relu_(x)`, `x.clip_(0, 1)`).

Each variant is `ops.define_inplace(base)`: no kernel or gradient rule of its own. The base op's
kernel computes the result, which is written into the input (a write that would lose the result's
kind, float into an integer tensor, is refused), and under autograd the base op's rule is recorded
for it, so every variant is differentiable exactly where its base op is.
"""

TENSOR_AND_TOP = ("oarlock", "Tensor")


def define_variants(ops, bases, namespaces=TENSOR_AND_TOP):
    """`<base>_` for each base op, exported as `<namespace>.<base>_` in each namespace."""
    for base in bases:
        ops.define_inplace(base, public=[f"{ns}.{base}_" for ns in namespaces])
