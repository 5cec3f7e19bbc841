"""The lessons' figures, so that a lesson cell that draws is one call and its distributed code stays in front.

Each function names the lesson and section that measures what it draws (d2l style): read the measurement
there, the drawing here. Lesson 1's and 4's figures are in plots_lessons_1_4.py.
"""

from __future__ import annotations

import matplotlib.pyplot as plt


def backward_timeline(grads_ready, buckets, backward_done):
    """A measured DDP backward pass: each layer's gradient, each bucket's all-reduce, when backward() returns.

    Lesson 2 (lessons/lesson_02_ddp_basics.ipynb), §7 "Gradients synchronize themselves in backward()".
    grads_ready: [(layer, seconds)]; buckets: [(layers, start, end)]; backward_done: seconds.
    """
    _, ax = plt.subplots(figsize=(10, 3.2))
    previous = 0.0
    for layer, t in sorted(grads_ready, key=lambda e: e[1]):  # compute: from the previous gradient to this one
        ax.broken_barh([(previous * 1e3, (t - previous) * 1e3)], (2.6, 0.8), color="tab:blue", alpha=0.75)
        ax.text((previous + t) / 2 * 1e3, 3.0, f"L{layer}", ha="center", va="center", color="white", fontsize=9)
        previous = t
    for row, (layers, start, end) in enumerate(sorted(buckets, key=lambda b: b[1])):
        y = 1.6 - row * 0.8
        ax.broken_barh([(start * 1e3, (end - start) * 1e3)], (y, 0.6), color="tab:orange")
        ax.text(end * 1e3, y + 0.3, f" bucket L{layers[0]}-L{layers[-1]} all-reduced", va="center", fontsize=8)
    ax.axvline(backward_done * 1e3, color="black", ls="--")
    ax.text(backward_done * 1e3, 3.65, "backward() returns ", ha="right", fontsize=8)
    ax.set_ylim(-0.5, 3.9)
    ax.set_xlim(0, backward_done * 1e3 * 1.35)  # room for the last bucket's label
    ax.set_yticks([3.0, 1.0])
    ax.set_yticklabels(["backward compute\n(rank 0)", "communication\n(rank 0)"])
    ax.set_xlabel("milliseconds since backward() started")
    ax.set_title("A measured DDP backward pass: buckets are all-reduced while earlier layers still compute")
    plt.tight_layout()
    plt.show()


def epoch_orders(with_set_epoch, without_set_epoch, epochs=3, ranks=2):
    """Which sample each rank reads, epoch by epoch, with and without sampler.set_epoch.

    Lesson 2, §8 "DistributedSampler and set_epoch". Each argument: orders[rank][epoch] = list of sample ids.
    """
    _, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, orders, title in (
        (axes[0], with_set_epoch, "with sampler.set_epoch(epoch)"),
        (axes[1], without_set_epoch, "without set_epoch"),
    ):
        rows = [orders[rank][epoch] for epoch in range(epochs) for rank in range(ranks)]
        ax.imshow(rows, cmap="tab20", vmin=0, vmax=19, aspect="auto")
        for y, row in enumerate(rows):
            for x, sample in enumerate(row):
                ax.text(x, y, sample, ha="center", va="center", fontsize=10)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"epoch {e}, rank {r}" for e in range(epochs) for r in range(ranks)])
        ax.set_xticks(range(len(rows[0])))
        ax.set_xlabel("position in the rank's epoch (batches of 3)")
        ax.set_title(title)
        for y in range(1, epochs):
            ax.axhline(y * ranks - 0.5, color="white", lw=3)  # between epochs
        ax.axvline(2.5, color="white", lw=3)  # between the two batches of 3
    plt.suptitle(f"Which sample each rank reads, epoch by epoch ({len(rows[0]) * ranks} samples, {ranks} ranks)")
    plt.tight_layout()
    plt.show()


def mean_estimate_errors(batch_sizes, errors):
    """Error of a rank's own batch mean against the pooled one, for shuffled and for sorted shards.

    Lesson 3 (lessons/lesson_03_syncbn_and_sharded_state.ipynb), §1 "BatchNorm under DDP".
    errors[sorted_shards] = [(local_error, global_error) per batch size].
    """
    _, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, sorted_shards in zip(axes, (False, True)):
        local, pooled = zip(*errors[sorted_shards])
        ax.loglog(batch_sizes, local, "o-", label="this rank's own batch (BatchNorm under DDP)")
        ax.loglog(batch_sizes, pooled, "s-", label="both ranks together (SyncBatchNorm)")
        ax.set_title("sorted shards: each rank sees one kind" if sorted_shards else "shuffled data")
        ax.set_xlabel("samples per rank, b")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("mean |estimated mean - true mean|")
    axes[0].legend(fontsize=8)
    plt.tight_layout()
    plt.show()


def accuracy_bars(accuracy, situations, methods, steps=60):
    """Test accuracy per normalization layer and data situation.

    Lesson 3, §2 "When local statistics hurt". accuracy[(situation label, method label)] = accuracy.
    """
    _, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.27
    for i, method in enumerate(methods):
        values = [accuracy[label, method] for label in situations]
        bars = ax.bar([s + (i - 1) * width for s in range(len(situations))], values, width, label=method)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(range(len(situations)), list(situations))
    ax.axhline(0.25, color="gray", ls=":", lw=1)
    ax.text(-0.45, 0.27, "chance", color="gray", fontsize=8)
    ax.set_ylabel(f"test accuracy after {steps} steps")
    ax.set_ylim(0, 1.3)
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    plt.tight_layout()
    plt.show()


ZERO_COLORS = {"DDP": "C0", "ZeRO-1": "C1", "ZeRO-2": "C2", "FSDP2 (ZeRO-3)": "C3", "ZeRO-3 / FSDP": "C3"}


def memory_per_rank(world_sizes, measured, mb=2**20, psi=7.5e9, gpus=(1, 2, 4, 8, 16, 32, 64)):
    """Left: measured bytes on the fullest rank (DDP, ZeRO-1, FSDP2; ZeRO-2 computed). Right: the ZeRO
    paper's formulas for a 7.5 B model in mixed precision.

    Lesson 3, §5 "ZeRO stages 1 to 3, measured". measured[n] = per-rank {method: {part: bytes}}.
    """
    _, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for method, marker in (("DDP", "o"), ("ZeRO-1", "s"), ("FSDP2 (ZeRO-3)", "^")):
        left.plot(
            world_sizes,
            [max(sum(r[method].values()) for r in measured[n]) / mb for n in world_sizes],
            marker=marker,
            color=ZERO_COLORS[method],
            label=f"{method}, measured",
        )
    one = measured[world_sizes[0]][0]["DDP"]  # everything whole: the parts of one replica
    zero2 = [(one["parameters"] + (one["gradients"] + one["optimizer state"]) / n) / mb for n in world_sizes]
    left.plot(world_sizes, zero2, "d--", color=ZERO_COLORS["ZeRO-2"], label="ZeRO-2, computed")
    left.set_ylim(0, None)
    left.set_xticks(world_sizes)
    left.set_xlabel("number of processes N")
    left.set_ylabel("MB on the fullest rank")
    left.set_title("0.53 M parameters, fp32, Adam (measured)")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)

    formulas = {
        "DDP": lambda n: 16 * psi,
        "ZeRO-1": lambda n: 4 * psi + 12 * psi / n,
        "ZeRO-2": lambda n: 2 * psi + 14 * psi / n,
        "ZeRO-3 / FSDP": lambda n: 16 * psi / n,
    }
    for method, f in formulas.items():
        right.plot(gpus, [f(n) / 1e9 for n in gpus], "o-", color=ZERO_COLORS[method], label=method)
    right.axhline(80, color="gray", ls=":")
    right.text(12, 88, "one 80 GB GPU", color="gray", fontsize=8)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xticks(list(gpus), [str(n) for n in gpus])
    right.set_xlabel("number of GPUs N")
    right.set_ylabel("GB per GPU, before activations")
    right.set_title(f"{psi / 1e9:g} B parameters, mixed precision + Adam (formula)")
    right.legend(fontsize=8)
    right.grid(alpha=0.3, which="both")
    plt.tight_layout()
    plt.show()
