"""Figures of lesson 3's memory sections (lessons/lesson_03_syncbn_and_sharded_state.ipynb, §6b, §6d)."""

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
    colors = ["tab:gray", "tab:green", "tab:orange"][: len(labels)]
    _, (left, right) = plt.subplots(1, 2, figsize=(9, 2.8))
    for ax, values, title, fmt in (
        (left, peaks, f"peak hidden activations ({unit})", "{:.1f}"),
        (right, forwards, "block forwards per step", "{:d}"),
    ):
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


def fsdp_timeline(events: list[tuple[str, int]], layer_bytes: list[int] | None = None):
    """One FSDP training step as a curve: the bytes of full (gathered) parameters held at each operation.

    Lesson 3, §6 "FSDP built by hand": events is [(kind, bytes held)] in the order the operations ran, kind
    "all-gather", "reduce-scatter" or "compute"; layer_bytes, when given, draws each layer's full size as a line.
    """
    start = next((i for i, (kind, _) in enumerate(events) if kind == "backward"), None)
    events = [event for event in events if event[0] != "backward"]
    _, ax = plt.subplots(figsize=(10, 3))
    xs = range(len(events))
    ax.step(xs, [held for _, held in events], where="post", color="tab:gray", label="full parameters held (bytes)")
    for kind, color, marker in (("all-gather", "tab:blue", "v"), ("reduce-scatter", "tab:red", "^")):
        points = [(x, held) for x, (k, held) in zip(xs, events) if k == kind]
        ax.scatter(
            [x for x, _ in points],
            [h for _, h in points],
            color=color,
            marker=marker,
            s=60,
            zorder=3,
            label=f"{kind} ({len(points)})",
        )
    for size in layer_bytes or []:
        ax.axhline(size, color="tab:gray", linewidth=0.5, linestyle=":")
    if start is not None:
        ax.axvspan(start - 0.5, len(events) - 0.5, color="tab:orange", alpha=0.08, label="backward")
    ax.set_xlabel("operations of one training step, in order (rank 0)")
    ax.set_ylabel("bytes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("FSDP: gather a layer, compute, free it; in backward, gather again and reduce-scatter")
    plt.tight_layout()
    plt.show()


def strategy_fit(measured: dict, predicted: dict, activations: int, budgets: dict, unit: str = "MiB"):
    """Per-rank bytes of each strategy, measured, as stacked bars (state, activations), the formula as a dot, and
    budgets as dashed lines labelled with the strategy each one picks.

    Lesson 3, §6d "Which strategy fits": measured and predicted are {strategy: state bytes}, in the order the
    strategies communicate (least first); budgets is {label: bytes}.
    """
    scale = 2**20
    names = list(measured)
    state = [measured[n] / scale for n in names]
    _, ax = plt.subplots(figsize=(8, 3.2))
    ax.bar(names, state, color="tab:blue", label="parameters, gradients, buckets, optimizer (measured)")
    ax.bar(names, [activations / scale] * len(names), bottom=state, color="tab:orange", label="activations (measured)")
    ax.scatter(
        names,
        [(predicted[n] + activations) / scale for n in names],
        color="black",
        zorder=3,
        label="formula + activations",
    )
    for (label, budget), color in zip(budgets.items(), ("tab:green", "tab:red", "tab:purple")):
        ax.axhline(budget / scale, color=color, linestyle="--", linewidth=1)
        ax.text(len(names) - 0.45, budget / scale, label, color=color, va="bottom", fontsize=9)
    ax.set_ylabel(f"bytes per rank ({unit})")
    ax.set_xlim(-0.6, len(names) + 0.9)
    ax.set_ylim(0, max((measured[n] + activations) / scale for n in names) * 1.45)
    ax.legend(fontsize=8, loc="upper left", ncol=3)
    ax.set_title("what each rank holds after one Adam step, and the budgets", fontsize=10)
    plt.tight_layout()
    plt.show()
