"""Train a small MLP on the two-moons problem with nothing but oarlock ops and autograd.

This is the main job until `oarlock train` lands: it builds a 2-64-64-2 MLP
from raw parameters, trains it with plain SGD on full batches and prints the
loss and accuracy as it goes. Paddle-style code: `import oarlock as paddle`.

    python examples/two_moons.py [--steps 600] [--lr 0.5] [--seed 0] [--plot moons.png]
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import oarlock as paddle
import oarlock.nn.functional as F


def two_moons(n: int, noise: float, rng: np.random.Generator):
    """n points on two interleaving half circles (the classic toy problem), labels 0/1."""
    t = rng.uniform(0, math.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(t), 1 - np.cos(t))
    y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    points = np.stack([x, y], axis=1) + rng.normal(0, noise, (n, 2))
    return points.astype(np.float32), (~upper).astype(np.int64)


def init_mlp(sizes, rng):
    """Parameters of an MLP, Paddle layout: weight [in, out], He-initialised."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = rng.normal(0, math.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32)
        params.append(paddle.to_tensor(w, stop_gradient=False))
        params.append(paddle.zeros([fan_out], dtype="float32", requires_grad=True))
    return params


def forward(params, x):
    h = x
    for i in range(0, len(params) - 2, 2):
        h = F.relu(F.linear(h, params[i], params[i + 1]))
    return F.linear(h, params[-2], params[-1])


def accuracy(logits, labels) -> float:
    return float((paddle.argmax(logits, axis=-1) == labels).astype("float32").mean())


def train(steps=600, lr=0.5, seed=0, n=512, noise=0.1, log_every=50, out=sys.stdout):
    rng = np.random.default_rng(seed)
    x_np, y_np = two_moons(n, noise, rng)
    x, y = paddle.to_tensor(x_np), paddle.to_tensor(y_np)
    params = init_mlp([2, 64, 64, 2], rng)
    for step in range(1, steps + 1):
        loss = F.cross_entropy(forward(params, x), y)
        loss.backward()
        with paddle.no_grad():
            for p in params:
                p[...] = p - lr * p.grad  # in place: p stays the same leaf
                p.clear_grad()
        if out is not None and (step % log_every == 0 or step == 1):
            print(f"step {step:4d}/{steps}  loss {loss.item():.4f}  accuracy {accuracy(forward(params, x), y):.3f}",
                  file=out, flush=True)
    x_test, y_test = two_moons(n, noise, rng)
    with paddle.no_grad():
        test_acc = accuracy(forward(params, paddle.to_tensor(x_test)), paddle.to_tensor(y_test))
    return params, test_acc


def plot(params, path, seed=0, n=512, noise=0.1):
    """Decision boundary and the data, saved as a PNG (needs matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x_np, y_np = two_moons(n, noise, np.random.default_rng(seed))
    gx, gy = np.meshgrid(np.linspace(-1.5, 2.5, 200), np.linspace(-1.0, 1.5, 200))
    grid = np.stack([gx.ravel(), gy.ravel()], axis=1).astype(np.float32)
    with paddle.no_grad():
        prob = F.softmax(forward(params, paddle.to_tensor(grid)), axis=-1).numpy()[:, 1].reshape(gx.shape)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.contourf(gx, gy, prob, levels=20, cmap="RdBu_r", alpha=0.6)
    ax.scatter(x_np[:, 0], x_np[:, 1], c=y_np, cmap="RdBu_r", s=8, edgecolors="k", linewidths=0.2)
    ax.set_title("oarlock MLP on two moons: P(class 1)")
    fig.savefig(path, dpi=120, bbox_inches="tight")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train a 2-64-64-2 MLP on two moons with oarlock.")
    parser.add_argument("--steps", type=int, default=600, help="full-batch SGD steps (default 600)")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    parser.add_argument("--seed", type=int, default=0, help="seed for data and initialisation (default 0)")
    parser.add_argument("--plot", metavar="PNG", help="save the decision boundary to this PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    params, test_acc = train(args.steps, args.lr, args.seed)
    print(f"test accuracy on fresh samples: {test_acc:.3f}")
    if args.plot:
        try:
            plot(params, args.plot, args.seed)
        except ImportError:
            print("--plot needs matplotlib: pip install matplotlib", file=sys.stderr)
            return 2
        print(f"decision boundary saved to {args.plot}")
    return 0 if test_acc > 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
