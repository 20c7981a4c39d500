"""The loss-curve PNG: train and validation loss against step, with the unigram entropy as a reference line."""

from __future__ import annotations

import math

import numpy as np


def plot_losses(path, train_losses, valid_points, entropy_nats: float, title: str = "") -> None:
    """train_losses: loss of steps 1..N; valid_points: [(step, loss)]; all in nats per byte."""
    import matplotlib
    matplotlib.use("Agg")  # no display is needed (or present) to write a PNG
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    try:
        steps = range(1, len(train_losses) + 1)
        ax.plot(steps, train_losses, lw=0.8, alpha=0.45, color="tab:blue", label="train (per step)")
        window = max(1, len(train_losses) // 50)
        if window > 1:
            # A trailing mean makes the trend readable under the per-batch noise.
            csum = np.concatenate([[0.0], np.cumsum(train_losses)])
            starts = np.maximum(np.arange(1, len(train_losses) + 1) - window, 0)
            smooth = (csum[1:] - csum[starts]) / (np.arange(1, len(train_losses) + 1) - starts)
            ax.plot(steps, smooth, lw=1.6, color="tab:blue", label=f"train ({window}-step mean)")
        if valid_points:
            vs, vl = zip(*valid_points)
            ax.plot(vs, vl, "o-", color="tab:orange", lw=1.6, ms=4, label="validation")
        ax.axhline(entropy_nats, color="gray", ls="--", lw=1.2,
                   label=f"unigram entropy {entropy_nats:.3f} nats ({entropy_nats / math.log(2):.3f} bits)")
        ax.set_xlabel("step")
        ax.set_ylabel("cross entropy (nats per byte)")
        ax.set_title(title or "oarlock train: byte-level GPT on stdlib docstrings")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
