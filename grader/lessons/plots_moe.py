"""Figure of lesson 1's expert-parallel section (lessons/lesson_01_data_vs_model_parallelism.ipynb, §4.4)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch


def _loads(ax, ranks, capacity, title):
    """Tokens each expert received, stacked by the rank they came from (hatched: from its own rank, no traffic),
    and the capacity line."""
    n = len(ranks)
    bottom = [0] * n
    for source in range(n):
        heights = [ranks[expert]["received"][source] for expert in range(n)]
        own = ["//" if expert == source else "" for expert in range(n)]  # these tokens never left their rank
        ax.bar(range(n), heights, bottom=bottom, color=plt.cm.tab10(source), hatch=own)
        bottom = [b + h for b, h in zip(bottom, heights)]
    line = ax.axhline(capacity, color="red", linestyle="--", label=f"capacity ({capacity}): the rest is dropped")
    sources = [Patch(color=plt.cm.tab10(source), label=f"from rank {source}") for source in range(n)]
    ax.set_xticks(range(n), [f"expert {e}\n(rank {e})" for e in range(n)])
    ax.set_ylabel("tokens received")
    ax.set_title(title + " (hatched: stayed on its rank)", fontsize=10)
    ax.legend(handles=[*sources, line], fontsize=7)


def expert_traffic(runs: dict, capacity: int):
    """Left panels: each expert's load under each router setting. Right: the bytes each rank sent to other
    ranks, all-to-all dispatch and combine against gathering every token and reduce-scattering the outputs.

    runs[skew] = per-rank {"received": tokens from each rank, "a2a_bytes": int, "dense_bytes": int}, measured
    by the lesson's gloo run of expert_parallel_forward.
    """
    _, axes = plt.subplots(1, len(runs) + 1, figsize=(5 * (len(runs) + 1), 3.8))
    for ax, (skew, ranks) in zip(axes, runs.items()):
        _loads(ax, ranks, capacity, f"router skew {skew}: tokens per expert")
    bytes_ax, n = axes[-1], len(next(iter(runs.values())))
    width = 0.8 / (len(runs) + 1)
    for i, (skew, ranks) in enumerate(runs.items()):
        sent = [got["a2a_bytes"] / 1024 for got in ranks]
        bytes_ax.bar([r + i * width for r in range(n)], sent, width, label=f"all_to_all_single, skew {skew}")
    dense = [got["dense_bytes"] / 1024 for got in next(iter(runs.values()))]  # the same for every routing
    bytes_ax.bar(
        [r + len(runs) * width for r in range(n)], dense, width, color="gray", label="all-gather + reduce-scatter"
    )
    bytes_ax.set_xticks([r + width * len(runs) / 2 for r in range(n)], [f"rank {r}" for r in range(n)])
    bytes_ax.set_ylim(0, max(dense) * 1.4)  # room for the legend above the bars
    bytes_ax.set_ylabel("KiB sent to other ranks")
    bytes_ax.set_title("what each rank sent (dispatch + combine)", fontsize=10)
    bytes_ax.legend(fontsize=7)
    plt.tight_layout()
    plt.show()
