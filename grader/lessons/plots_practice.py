"""Figures of lesson 2's "DDP in practice" section (lessons/02_ddp_basics.ipynb, §14)."""
from __future__ import annotations

import matplotlib.pyplot as plt


def sync_strategies(milliseconds: dict[str, float]):
    """One training step (forward, backward, gradient averaging) per way of synchronizing the gradients.

    Lesson 2, §14 "DDP in practice": milliseconds is {strategy: best step time on rank 0}.
    """
    labels = list(milliseconds)
    values = [milliseconds[label] for label in labels]
    colors = ["tab:red" if "parameter" in label else "tab:gray" if "flat" in label else "tab:blue"
              for label in labels]
    _, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.2))
    ax.barh(labels, values, color=colors)
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:.1f} ms", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.25)
    ax.set_xlabel("milliseconds per step (best of 7, rank 0; gloo on CPU, 2 ranks)")
    ax.set_title("The same model, its gradients averaged three ways")
    plt.tight_layout()
    plt.show()
