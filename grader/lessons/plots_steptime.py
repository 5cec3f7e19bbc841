"""Figures of lesson 3's step-time section (lessons/lesson_03_syncbn_and_sharded_state.ipynb, §6e)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter


def alpha_beta_and_layouts(nbytes: list, seconds: list, fitted: tuple, layouts: dict):
    """Left: measured all-reduce times against the size, and the fitted line a + b·bytes. Right: the step time of
    each layout as stacked bars (useful compute, the bubble, communication), its MFU written above.

    fitted is (a, b) in seconds and seconds per byte; layouts is {label: (compute, bubble, comm, mfu)} in seconds.
    """
    a, b = fitted
    _, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [1, 1.3]})
    kib = [n / 1024 for n in nbytes]
    left.plot(kib, [s * 1e3 for s in seconds], "o", color="tab:blue", label="measured (fastest of the repeats)")
    left.plot(kib, [(a + b * n) * 1e3 for n in nbytes], "-", color="tab:red", label="fitted: a + b·bytes")
    left.set_xscale("log")
    left.set_yscale("log")
    left.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_major_formatter(ScalarFormatter())
    left.yaxis.set_minor_formatter(NullFormatter())
    left.set_xlabel("all-reduce size (KiB)")
    left.set_ylabel("time (ms)")
    left.set_title("one all-reduce on 2 CPU processes (gloo)", fontsize=10)
    left.legend(fontsize=8)
    names = list(layouts)
    compute = [v[0] for v in layouts.values()]
    bubble = [v[1] for v in layouts.values()]
    comm = [v[2] for v in layouts.values()]
    names = [name.replace(" × ", "×\n", 1) if len(name) > 12 else name for name in names]  # long ones on 2 lines
    right.bar(names, compute, color="tab:green", label="compute (6·N·T / peak)")
    right.bar(names, bubble, bottom=compute, color="tab:olive", label="pipeline bubble")
    tops = [c + w for c, w in zip(compute, bubble)]
    right.bar(names, comm, bottom=tops, color="tab:purple", label="communication (α-β)")
    totals = [t + c for t, c in zip(tops, comm)]
    ordered = sorted(totals)
    # one layout far slower than the rest (tensor parallelism across nodes) would flatten every other bar: cut it
    top = ordered[-2] * 1.5 if len(ordered) > 1 and ordered[-1] > 3 * ordered[-2] else ordered[-1] * 1.2
    for i, (total, mfu) in enumerate(zip(totals, (v[3] for v in layouts.values()))):
        label = f"MFU {mfu:.0%}" + (f"\n{total:.0f} s (cut)" if total > top else "")
        right.text(i, min(total, top * 0.88), label, ha="center", va="bottom", fontsize=8)
    right.set_ylabel("seconds per step")
    right.set_ylim(0, top)
    right.tick_params(axis="x", labelsize=8)
    right.legend(fontsize=8, loc="upper left")
    right.set_title("the worked example: one step per layout, nothing overlapped", fontsize=10)
    plt.tight_layout()
    plt.show()
