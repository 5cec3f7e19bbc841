"""Figures of lesson 3's memory sections (lessons/03_syncbn_and_sharded_state.ipynb, §6b)."""
from __future__ import annotations

import matplotlib.pyplot as plt


def checkpoint_peaks(measured: dict, unit: str = "MiB"):
    """Peak activation memory and forward count per way of checkpointing, as two bar charts side by side.

    Lesson 3, §6b "Activation checkpointing": measured is {mode: (peak bytes, block forwards)}, mode None for no
    checkpointing, "per block" or "whole model".
    """
    labels = ["none" if mode is None else mode for mode in measured]
    peaks = [peak / 2**20 for peak, _ in measured.values()]
    forwards = [count for _, count in measured.values()]
    colors = ["tab:gray", "tab:green", "tab:orange"][:len(labels)]
    _, (left, right) = plt.subplots(1, 2, figsize=(9, 2.8))
    for ax, values, title, fmt in ((left, peaks, f"peak hidden activations ({unit})", "{:.1f}"),
                                   (right, forwards, "block forwards per step", "{:d}")):
        ax.barh(labels, values, color=colors)
        for y, value in enumerate(values):
            ax.text(value, y, " " + fmt.format(value), va="center", fontsize=9)
        ax.set_xlim(0, max(values) * 1.25)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
    left.set_ylabel("checkpointing")
    right.set_yticklabels([])
    plt.tight_layout()
    plt.show()
