"""The figures of lessons 1 and 4 (lessons 2 and 3: plots.py). Each function names the lesson and section
that measures what it draws."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch


def training_memory(models, training_state_gb, batches, activation_mb, params_mb):
    """Left: float32 + Adam training state of well-known model sizes. Right: measured saved activations.

    Lesson 1 (lessons/lesson_01_data_vs_model_parallelism.ipynb), §1 "Why parallelize at all?".
    """
    _, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    bottom = [0.0] * len(models)
    for part, color in zip(["parameters", "gradients", "Adam state"], ["tab:blue", "tab:orange", "tab:green"]):
        heights = [training_state_gb(n)[part] for n in models.values()]
        left.bar(list(models), heights, bottom=bottom, label=part, color=color)
        bottom = [b + h for b, h in zip(bottom, heights)]
    left.axhline(80, color="red", linestyle="--", label="one 80 GB GPU")
    left.set_yscale("log")
    left.set_ylabel("GB (log scale)")
    left.set_title("Training state, float32 + Adam (16 bytes/parameter)")
    left.legend()
    right.plot(batches, activation_mb, "o-", label="saved activations (measured)")
    right.axhline(params_mb, color="gray", linestyle="--", label="parameters")
    right.set_xlabel("batch size")
    right.set_ylabel("MB")
    right.set_title("A 4-layer MLP (512 wide): activations grow with the batch")
    right.legend()
    plt.tight_layout()
    plt.show()


def _schedule(ax, blocks, title):
    for stage, start, length, kind, j in blocks:
        ax.barh(stage, length, left=start, color="tab:blue" if kind == "F" else "tab:orange", edgecolor="white")
        ax.text(start + length / 2, stage, f"{kind}{j}", ha="center", va="center", color="white", fontsize=8)
    ax.set_yticks(range(max(b[0] for b in blocks) + 1))
    ax.set_ylabel("stage (rank)")
    ax.invert_yaxis()
    ax.set_title(title)


def gpipe_schedules(schedule, stages=4, micro=(1, 8)):
    """Two GPipe schedules (blocks from `schedule(stages, m)`) and the bubble formula for 2, 4, 8 stages.

    Lesson 1, §4.3 "Pipeline (inter-layer) parallelism".
    """
    _, axes = plt.subplots(1, 3, figsize=(15, 3.5))
    for ax, m in zip(axes[:2], micro):
        blocks = schedule(stages, m)
        total = max(start + length for _, start, length, _, _ in blocks)
        busy = sum(length for _, _, length, _, _ in blocks) / stages  # per stage
        _schedule(ax, blocks, f"{stages} stages, {m} micro-batch{'es' if m > 1 else ''}: bubble {1 - busy / total:.0%}")
        ax.set_xlabel("time (forward = 1 unit, backward = 2)")
    ms = range(1, 33)
    for p in (2, 4, 8):
        axes[2].plot(ms, [(p - 1) / (m + p - 1) for m in ms], label=f"p = {p} stages")
    axes[2].set_xlabel("micro-batches m")
    axes[2].set_ylabel("idle share of the step")
    axes[2].set_title("bubble = (p - 1) / (m + p - 1)")
    axes[2].legend()
    plt.tight_layout()
    plt.show()


def pipeline_timelines(runs):
    """Measured busy times of a real two-stage pipeline. runs[n_micro] = per-rank {"busy": [(start, s)], "end": t}.

    Lesson 1, §4.3, the two-stage pipeline run.
    """
    _, axes = plt.subplots(1, len(runs), figsize=(13, 2.8), sharex=True)
    for ax, (n_micro, ranks) in zip(axes, runs.items()):
        origin = min(start for r in ranks for start, _ in r["busy"])  # the first block of work starts at 0
        for rank, result in enumerate(ranks):
            ax.broken_barh(
                [((s - origin) * 1e3, d * 1e3) for s, d in result["busy"]],
                (rank - 0.35, 0.7),
                color=["tab:blue", "tab:green"][rank],
                edgecolor="white",
            )
        ax.set_yticks([0, 1], ["stage 0", "stage 1"])
        ax.invert_yaxis()
        ax.set_xlabel("milliseconds")
        waited = (ranks[1]["busy"][0][0] - origin) * 1e3
        end = (max(r["end"] for r in ranks) - origin) * 1e3
        ax.set_title(
            f"{n_micro} micro-batch{'es' if n_micro > 1 else ''}: stage 1 idle for the first {waited:.0f} "
            f"ms; done at {end:.0f} ms",
            fontsize=10,
        )
    plt.tight_layout()
    plt.show()


def _buffers(ax, rows, title):
    width = max(len(row) for row in rows)
    grid = torch.full((len(rows), width), float("nan"))
    for i, row in enumerate(rows):
        grid[i, : len(row)] = torch.tensor(row)
    ax.imshow(grid, cmap="viridis", vmin=0, vmax=130, aspect="auto")
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:g}", ha="center", va="center", color="white" if value < 80 else "black")
    ax.set_yticks(range(len(rows)), [f"rank {i}" for i in range(len(rows))])
    ax.set_xticks([])
    ax.set_title(title, fontsize=10)


def collectives(demo):
    """Each rank's buffer before and after each collective. demo[rank][name] = (before, after).

    Lesson 1, §2 "The collectives".
    """
    names, n = list(demo[0]), len(demo)
    _, axes = plt.subplots(2, len(names), figsize=(17, 5))
    for col, name in enumerate(names):
        _buffers(axes[0, col], [demo[r][name][0] for r in range(n)], f"{name}\nbefore")
        _buffers(axes[1, col], [demo[r][name][1] for r in range(n)], "after")
    plt.tight_layout()
    plt.show()


def ring_states(states):
    """Whose contributions each rank's copy of each chunk holds, step by step. states = [(title, grid)].

    Lesson 1, §5 "Ring all-reduce, and what it costs".
    """
    n = len(states[0][1])
    _, axes = plt.subplots(1, len(states), figsize=(17, 2.8))
    for ax, (title, grid) in zip(axes, states):
        ax.imshow([[len(s) for s in row] for row in grid], cmap="Blues", vmin=0, vmax=n + 0.5)
        for r, row in enumerate(grid):
            for c, s in enumerate(row):
                ax.text(c, r, "".join(map(str, sorted(s))), ha="center", va="center", fontsize=8)
        ax.set_xticks(range(n), [f"c{c}" for c in range(n)])
        ax.set_yticks(range(n), [f"r{r}" for r in range(n)])
        ax.set_title(title, fontsize=9)
    plt.tight_layout()
    plt.show()


def allreduce_cost(nbytes, seconds, alpha, bandwidth, large):
    """Left: traffic of the busiest rank, ring against root. Right: measured gloo all_reduce times and the
    alpha-beta model (bandwidth fitted on the sizes where `large` is true).

    Lesson 1, §5, the all-reduce measurement.
    """
    _, (left, right) = plt.subplots(1, 2, figsize=(13, 4))
    ranks = list(range(2, 33))
    left.plot(ranks, [2 * (n - 1) / n for n in ranks], label="ring: every rank sends 2(N-1)/N")
    left.plot(ranks, [n - 1 for n in ranks], label="to a root and back: the root sends N-1")
    left.set_yscale("log")
    left.set_xlabel("ranks N")
    left.set_ylabel("data sent by the busiest rank\n(in tensor sizes; it receives as much)")
    left.set_title("All-reduce traffic per rank")
    left.legend()
    right.loglog(
        nbytes[~large], seconds[~large] * 1e3, "o", color="tab:blue", mfc="none", label="measured (fastest of 7)"
    )
    right.loglog(nbytes[large], seconds[large] * 1e3, "o", color="tab:blue", label="measured, used for the bandwidth")
    right.loglog(
        nbytes,
        (alpha + nbytes / bandwidth) * 1e3,
        "-",
        color="tab:orange",
        label=f"model: {alpha * 1e6:.0f} µs + bytes / ({bandwidth / 1e9:.2f} GB/s)",
    )
    right.set_xlabel("tensor size (bytes)")
    right.set_ylabel("all_reduce time (ms)")
    right.set_title("gloo all_reduce, 2 processes on this machine")
    right.legend(fontsize=8)
    plt.tight_layout()
    plt.show()


def restart_timeline(evts, t0, kill_time):
    """Each worker's start-up, epochs and snapshots, the kill, the lost work and the resumed attempt.

    Lesson 4 (lessons/lesson_04_torchrun.ipynb), §2 "Fault tolerance". evts: the script's events.jsonl records.
    """
    _, ax = plt.subplots(figsize=(11, 3.2))
    for rank, attempt in sorted({(e["rank"], e["attempt"]) for e in evts}):
        _attempt_lane(ax, [e for e in evts if e["rank"] == rank and e["attempt"] == attempt], 1 - rank, t0, kill_time)
    for e in evts:
        if e["event"] == "snapshot":
            ax.plot(e["t"] - t0, 1.38, marker="v", color="black", markersize=6)
    restart = [e["t"] - t0 for e in evts if e["event"] == "start" and e["attempt"] == 1]
    if kill_time is not None and restart:
        ax.annotate(
            "", xy=(min(restart), 0.5), xytext=(kill_time - t0, 0.5), arrowprops={"arrowstyle": "->", "color": "gray"}
        )
        ax.text(
            (kill_time - t0 + min(restart)) / 2,
            0.58,
            "SIGTERM to rank 0,\nnew rendezvous,\nnew processes",
            ha="center",
            va="bottom",
            fontsize=7,
            color="dimgray",
        )
    if kill_time is not None:
        ax.axvline(kill_time - t0, color="red", linestyle="--")
        ax.text(kill_time - t0, 1.62, " SIGKILL (rank 1)", color="red", fontsize=8, va="bottom")
    ax.set_yticks([1, 0], ["rank 0", "rank 1"])
    ax.set_ylim(-0.5, 1.9)
    ax.set_xlabel("seconds since torchrun was launched")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("lightgray", "tab:blue", "salmon", "tab:green")]
    handles.append(plt.Line2D([], [], marker="v", color="black", linestyle=""))
    ax.legend(
        handles,
        [
            "start-up (imports, rendezvous, DDP)",
            "epochs, attempt 0",
            "lost work",
            "epochs, attempt 1 (resumed)",
            "snapshot written",
        ],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    ax.set_title(
        "A worker killed in epoch 2, torchrun restarts the group, the script resumes from its snapshot", fontsize=10
    )
    plt.tight_layout()
    plt.show()


def _attempt_lane(ax, mine, y, t0, kill_time) -> None:
    """One rank's attempt at height y: its start-up, its epochs, and (attempt 0) the epoch the kill cut short."""
    attempt = mine[0]["attempt"]
    colors = {0: "tab:blue", 1: "tab:green"}
    start = next(e["t"] for e in mine if e["event"] == "start") - t0
    ready = next((e["t"] for e in mine if e["event"] == "ready"), None)
    if ready is None:
        return
    ready -= t0
    ax.barh(y, ready - start, left=start, height=0.5, color="lightgray", edgecolor="gray")
    ax.text((start + ready) / 2, y, "start-up", ha="center", va="center", fontsize=7)
    begin = ready
    for e in (e for e in mine if e["event"] == "epoch"):
        end = e["t"] - t0
        ax.barh(y, end - begin, left=begin, height=0.5, color=colors.get(attempt, "gray"), edgecolor="white")
        ax.text((begin + end) / 2, y, str(e["epoch"]), ha="center", va="center", color="white", fontsize=8)
        begin = end
    if attempt == 0 and kill_time is not None:  # the epoch in progress when the worker was killed
        ax.barh(y, kill_time - t0 - begin, left=begin, height=0.5, color="salmon", hatch="//", edgecolor="red")


def elastic_lanes(lanes, t0, b_launched):
    """One bar per worker process of an elastic job, coloured by its WORLD_SIZE.

    Lesson 4, §3 "Rendezvous and elasticity". lanes: [(first time, node label, the worker's printed rows)].
    """
    _, ax = plt.subplots(figsize=(10, 2.6))
    colors = {"1": "tab:orange", "2": "tab:purple"}
    for y, (_, label, mine) in enumerate(reversed(lanes)):
        begin, end = mine[0]["t"] - t0, mine[-1]["t"] - t0
        first = mine[0]
        ax.barh(y, max(end - begin, 0.05), left=begin, height=0.5, color=colors.get(first["WORLD_SIZE"], "gray"))
        ax.text(
            end + 0.1,
            y,
            f"{label}, pid {first['pid']}: RANK {first['RANK']}, WORLD_SIZE {first['WORLD_SIZE']}, "
            f"restart count {first['TORCHELASTIC_RESTART_COUNT']}",
            va="center",
            fontsize=7,
        )
    ax.axvline(b_launched - t0, color="gray", linestyle="--")
    ax.text(b_launched - t0, len(lanes) - 0.45, " node B launched", color="gray", fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(0, max(r[2][-1]["t"] for r in lanes) - t0 + 5.5)
    ax.set_ylim(-0.6, len(lanes) - 0.2)
    ax.set_xlabel("seconds since node A was launched (a bar: a worker process, from its first print to its last)")
    ax.set_title("--nnodes=1:2: the job grows from one node to two; node A's worker is replaced", fontsize=10)
    plt.tight_layout()
    plt.show()
