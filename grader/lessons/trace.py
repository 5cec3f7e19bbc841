"""Reading a torch.profiler Chrome trace: when backward computed and when the all-reduces ran.

Lesson 2, §14.8 "Seeing the overlap: the profiler" (lessons/lesson_02_ddp_basics.ipynb): a rank profiles one DDP step,
exports the trace (prof.export_chrome_trace) and keeps two lanes of it, drawn by `timeline`.
"""

from __future__ import annotations

import json

import matplotlib.pyplot as plt

BACKWARD = "autograd::engine::evaluate_function: "  # autograd's record of one backward node
# The CPU-side record of a collective: gloo:all_reduce here, nccl:all_reduce on GPUs.
COLLECTIVES = ("gloo:all_reduce", "nccl:all_reduce")


def lanes(path: str) -> dict[str, list[tuple[float, float, str]]]:
    """{"backward": [...], "all_reduce": [...]} of (start ms, end ms, name), from the trace's first such event.

    Raises ValueError for a file that is not a Chrome trace, or one that holds no backward node.
    """
    with open(path, encoding="utf-8") as f:
        try:
            events = json.load(f)["traceEvents"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a Chrome trace (a JSON object with traceEvents): {exc}") from None
    spans = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    found = {
        "backward": [
            (e["ts"], e["ts"] + e["dur"], e["name"][len(BACKWARD) :]) for e in spans if e["name"].startswith(BACKWARD)
        ],
        "all_reduce": [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in spans if e["name"] in COLLECTIVES],
    }
    if not found["backward"]:
        raise ValueError(f"{path} holds no backward node ({BACKWARD}...): profile a step that calls backward()")
    t0 = min(start for lane in found.values() for start, _, _ in lane)
    return {lane: sorted(((s - t0) / 1e3, (e - t0) / 1e3, n) for s, e, n in spans_) for lane, spans_ in found.items()}


def timeline(lanes: dict[str, list[tuple[float, float, str]]]):
    """Backward's nodes on one row, the all-reduces on another: what overlaps is what shares a moment."""
    _, ax = plt.subplots(figsize=(10, 2.6))
    for row, (lane, color) in enumerate((("backward", "tab:blue"), ("all_reduce", "tab:orange"))):
        ax.broken_barh([(s, e - s) for s, e, _ in lanes[lane]], (row - 0.35, 0.7), color=color, edgecolor="white")
    ax.set_yticks([0, 1], ["backward nodes\n(autograd)", "all-reduces\n(gloo's thread)"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlabel("milliseconds since the first recorded event (rank 0, one DDP step)")
    ax.set_title("torch.profiler's trace of one DDP step: gradient all-reduces against backward")
    plt.tight_layout()
    plt.show()
