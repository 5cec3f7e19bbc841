"""The class report: flagged students first, then per check how many passed and
the most frequent failure messages, per task how many got full marks, and a
plot: which DDP mistakes the class makes most, next to a histogram of totals.

    python -m grader report 02_ddp_basics [--root COURSE]
"""

from __future__ import annotations

import collections
import html
import os
import re

from grader.exercises import get_exercise
from grader.gradebook.course import Course
from grader.gradebook.results import load_sealed


def load_results(course: Course, assignment: str) -> list[dict]:
    """The results the grader sealed (a file forged between runs is left out)."""
    return load_sealed(course.results_dir(assignment))


def summarize(assignment: str, results: list[dict]) -> list[dict]:
    """One row per check: passed count, students graded, top failure messages."""
    rows = []
    for check in get_exercise(assignment).checks:
        outcomes = [c for r in results if r.get("report") for c in r["report"]["checks"] if c["name"] == check.name]
        failures = collections.Counter(
            c["message"].splitlines()[0] for c in outcomes if not c["passed"] and c["message"]
        )
        rows.append(
            {
                "check": check.name,
                "task": check.task,
                "hidden": check.hidden,
                "passed": sum(c["passed"] for c in outcomes),
                "graded": len(outcomes),
                "top_failures": failures.most_common(3),
            }
        )
    return rows


def full_marks_per_task(assignment: str, results: list[dict]) -> dict[str, tuple[int, float]]:
    """task -> (students with every point of the task, the task's points)."""
    exercise = get_exercise(assignment)
    out = {}
    for task in exercise.tasks:
        top = sum(c.points for c in exercise.checks if c.task == task)
        full = sum(
            1
            for r in results
            if r.get("report") and sum(c["points"] for c in r["report"]["checks"] if c["task"] == task) >= top
        )
        out[task] = (full, top)
    return out


_MARKDOWN = re.compile(r"([\\`*_\[\]!|~])")  # what Markdown would read as a link, an image, code or a table's edge


def text(student_text: str) -> str:
    """Text a student wrote or chose (a message, a flag, a name) as inert Markdown: HTML escaped (a raw `<img>`
    stays text) and Markdown's link, image, emphasis, code and table characters backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", html.escape(" ".join(str(student_text).split())))


def markdown_lines(assignment: str, results: list[dict], rows: list[dict]) -> list[str]:
    flagged = [r for r in results if r.get("flags")]
    lines = [f"# Class report: {assignment}", ""]
    unsandboxed = [r["student"] for r in results if r.get("sandboxed") is False]
    if unsandboxed:
        lines += [
            f"**Graded unsandboxed** (`--no-sandbox`): {len(unsandboxed)} of {len(results)} submissions ran as "
            "the grading user, with its files, environment and network.",
            "",
        ]
    plans: dict[str, list[str]] = {}
    for r in results:
        for plan in r.get("plans") or []:
            plans.setdefault(plan, []).append(r["student"])
    if plans:
        lines += [
            "Hardware plans the runs used: "
            + "; ".join(f"{plan} ({len(who)} of {len(results)})" for plan, who in plans.items()),
            "",
        ]
    if flagged:
        lines += [f"## Flagged ({len(flagged)}): look at these first", ""]
        lines += [f"- **{text(r['student'])}**: {text('; '.join(r['flags']))}" for r in flagged] + [""]
    graded = [r for r in results if r.get("report")]
    lines += [f"{len(results)} submissions graded.", "", "| task | full marks |", "|---|---|"]
    for task, (full, top) in full_marks_per_task(assignment, results).items():
        lines.append(f"| {task} ({top:g} point{'' if top == 1 else 's'}) | {full}/{len(graded)} |")
    lines += ["", "| check | task | passed | most frequent failure |", "|---|---|---|---|"]
    for row in rows:
        top = row["top_failures"][0][0] if row["top_failures"] else ""
        lines.append(f"| {row['check']} | {row['task']} | {row['passed']}/{row['graded']} | {text(top)} |")
    return lines


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
    md = os.path.join(out_dir, f"{assignment}.md")
    with open(md, "w") as f:
        f.write("\n".join(markdown_lines(assignment, results, rows)) + "\n")

    failing = sorted(
        (r for r in rows if r["graded"] and r["passed"] < r["graded"]), key=lambda r: r["graded"] - r["passed"]
    )
    fig, (ax, hist) = plt.subplots(
        1, 2, figsize=(17, 0.5 * max(len(failing), 4) + 1.4), gridspec_kw={"width_ratios": [3, 1]}
    )
    counts = [r["graded"] - r["passed"] for r in failing]
    ax.barh([f"{r['task']}: {r['check']}" for r in failing], counts, color="tab:red", alpha=0.3)
    for y, row in enumerate(failing):
        mistake = row["top_failures"][0][0] if row["top_failures"] and not row["hidden"] else "(hidden check)"
        ax.text(0.05, y, mistake if len(mistake) <= 90 else mistake[:87] + "...", va="center", fontsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"students failing the check (of {len(results)}), with its most frequent message")
    ax.set_title(f"{assignment}: the mistakes the class makes most", loc="left")

    max_score = get_exercise(assignment).max_score
    totals = [r["report"]["score"] for r in results if r.get("report")]
    hist.hist(
        totals, bins=min(int(max_score) + 1, 17), range=(0, max_score), color="tab:blue", alpha=0.6, edgecolor="white"
    )
    hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    hist.set_xlabel(f"total score (of {max_score:g})")
    hist.set_ylabel("students")
    hist.set_title("total scores", loc="left")
    fig.tight_layout()
    png = os.path.join(out_dir, f"{assignment}.png")
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return md, png
