"""Figures of lesson 2's "DDP in practice" section (lessons/lesson_02_ddp_basics.ipynb, §14)."""

from __future__ import annotations

import matplotlib.pyplot as plt


def sync_strategies(milliseconds: dict[str, float], no_overlap: dict[str, float] | None = None):
    """One training step (forward, backward, gradient averaging) per way of synchronizing the gradients.

    Lesson 2, §14.6 "How big should a bucket be?": milliseconds is {strategy: best step time on rank 0};
    no_overlap, when given, is {strategy: the α–β prediction if no message overlapped backward}, drawn as a tick.
    """
    labels = list(milliseconds)
    values = [milliseconds[label] for label in labels]
    colors = [
        "tab:red" if "parameter" in label else "tab:gray" if "flat" in label or "no " in label else "tab:blue"
        for label in labels
    ]
    _, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.2))
    ax.barh(labels, values, color=colors)
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:.1f} ms", va="center", fontsize=8)
    if no_overlap:
        ys = [y for y, label in enumerate(labels) if label in no_overlap]
        ax.scatter(
            [no_overlap[labels[y]] for y in ys],
            ys,
            marker="|",
            s=400,
            color="black",
            zorder=3,
            label="α–β prediction with no overlap: compute + Σ(α + bytes/bandwidth)",
        )
        ax.legend(loc="lower right", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values + list((no_overlap or {}).values())) * 1.3)
    ax.set_xlabel("milliseconds per step (best of several, rank 0; gloo on CPU, 2 ranks)")
    ax.set_title("The same model, its gradients averaged in different ways")
    plt.tight_layout()
    plt.show()
