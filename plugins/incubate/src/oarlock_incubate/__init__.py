"""oarlock-incubate: Paddle's paddle.incubate names (fused functions and layers) for model code written for Paddle.

Each fused function is written with oarlock's differentiable ops, so its gradient comes from autograd; the
modules are one family each (rotary.py, swiglu.py, fused_linear.py) and plugin.py exports them."""
