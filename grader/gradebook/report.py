"""The class report: per check, how many passed, the most frequent failure
messages, and a plot of which DDP mistakes the class makes most.

    python -m grader report 02_ddp_basics [--root COURSE]
"""
from __future__ import annotations

import collections
import glob
import json
import os

from grader.exercises import get_exercise
from grader.gradebook.course import Course


def load_results(course: Course, assignment: str) -> list[dict]:
    results = []
    for path in sorted(glob.glob(os.path.join(course.results_dir(assignment), "*.json"))):
        with open(path) as f:
            results.append(json.load(f))
    return results


def summarize(assignment: str, results: list[dict]) -> list[dict]:
    """One row per check: passed count, students graded, top failure messages."""
    rows = []
    for check in get_exercise(assignment).checks:
        outcomes = [c for r in results if r.get("report") for c in r["report"]["checks"] if c["name"] == check.name]
        failures = collections.Counter(c["message"].splitlines()[0] for c in outcomes if not c["passed"] and c["message"])
        rows.append({"check": check.name, "task": check.task, "hidden": check.hidden,
                     "passed": sum(c["passed"] for c in outcomes), "graded": len(outcomes),
                     "top_failures": failures.most_common(3)})
    return rows


def write_report(course: Course, assignment: str, out_dir: str | None = None) -> tuple[str, str]:
    """Writes <out>/<assignment>.md and <out>/<assignment>.png; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir = out_dir or os.path.join(course.root, "reports")
    os.makedirs(out_dir, exist_ok=True)
    results = load_results(course, assignment)
    rows = summarize(assignment, results)
    lines = [f"# Class report: {assignment}", "", f"{len(results)} submissions graded.", "",
             "| check | task | passed | most frequent failure |", "|---|---|---|---|"]
    for row in rows:
        top = row["top_failures"][0][0] if row["top_failures"] else ""
        lines.append(f"| {row['check']} | {row['task']} | {row['passed']}/{row['graded']} | {top.replace('|', '/')} |")
    md = os.path.join(out_dir, f"{assignment}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")

    failing = sorted((r for r in rows if r["graded"] and r["passed"] < r["graded"]),
                     key=lambda r: r["graded"] - r["passed"])
    fig, ax = plt.subplots(figsize=(13, 0.5 * max(len(failing), 2) + 1.4))
    counts = [r["graded"] - r["passed"] for r in failing]
    ax.barh([f"{r['task']}: {r['check']}" for r in failing], counts, color="tab:red", alpha=0.3)
    for y, row in enumerate(failing):
        mistake = row["top_failures"][0][0] if row["top_failures"] and not row["hidden"] else "(hidden check)"
        ax.text(0.05, y, mistake if len(mistake) <= 90 else mistake[:87] + "...", va="center", fontsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"students failing the check (of {len(results)}), with its most frequent message")
    ax.set_title(f"{assignment}: the mistakes the class makes most", loc="left")
    fig.tight_layout()
    png = os.path.join(out_dir, f"{assignment}.png")
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return md, png
