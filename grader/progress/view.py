"""Showing progress: a text table (python -m grader progress) and a notebook view (show_progress())."""

from __future__ import annotations

import html
import json
import os
import sys
import time
from dataclasses import asdict

from grader.exercises import exercise_ids
from grader.i18n import N_, _, ngettext
from grader.lessons.quiz import lesson_scores, quiz_report
from grader.progress.find import GRADED_COPY, find_root
from grader.progress.grade import AssignmentProgress, course_progress
from grader.progress.submitted import last_submitted

LEGEND = N_("✓ passes   ✗ fails (run its check cell to see why)   · not started   (n hints) hints you revealed")
NO_NOTEBOOK = N_("no notebook found (fetch it from the Assignments tab)")


MARKS = {"pass": "✓", "fail": "✗", "todo": "·"}


def _relative(path: str | None, root: str) -> str:
    if path is None:
        return _("no notebook found")
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def submission_state(row: AssignmentProgress, root: str) -> str:
    """When the notebook graded here was saved, and whether and when the assignment was submitted."""
    when = last_submitted(root, row.assignment)
    submitted = _("submitted {time}", time=when) if when else _("not submitted")
    if row.notebook is None or not os.path.isfile(row.notebook):
        return submitted
    saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(row.notebook)))
    return _("saved {time}", time=saved) + " · " + submitted


def hints_note(used: int) -> str:
    """How many hints of the task the student revealed (grader/notebook/hints.py), after its name."""
    return " " + ngettext("({n} hint)", "({n} hints)", used) if used else ""


def text_rows(row: AssignmentProgress, root: str, width: int = 100) -> list[str]:
    if row.notebook is None or row.problem:
        return [f"{row.assignment:<20} {row.problem or _(NO_NOTEBOOK)}"]
    head = f"{row.assignment:<20} " + _(
        "{passed:>2}/{tasks} tasks  {points:g}/{max_points:g} points  {notebook}",
        passed=row.passed,
        tasks=len(row.tasks),
        points=row.points,
        max_points=row.max_points,
        notebook=_relative(row.notebook, root),
    )
    lines, line = [head, "  " + submission_state(row, root)], "  "
    for t in row.tasks:
        item = f"  {MARKS[t.status]} {t.task}{hints_note(t.hints)}"
        if len(line) + len(item) > width:
            lines.append(line)
            line = "  "
        line += item
    return lines + [line]


def text_report(rows: list[AssignmentProgress], root: str) -> str:
    lines = [heading(root)]
    for row in rows:
        lines += text_rows(row, root)
    return "\n".join(lines + [_(LEGEND)])


def heading(root: str) -> str:
    return _(
        "Your progress: the visible checks, run on the notebooks as saved in {course}, not on your kernel: save first "
        "(an unsaved change is not counted here, so check() in the kernel may differ)",
        course=os.path.basename(root.rstrip(os.sep)) or root,
    )


class _ProgressView:
    """The notebook cell's output: an HTML table with a plain-text twin, filled in row by row."""

    def __init__(self, root: str, expected: int):
        self.root, self.expected, self.rows, self.done = root, expected, [], False

    def __repr__(self) -> str:
        report = text_report(self.rows, self.root)
        return (
            report
            if self.done
            else report
            + "\n"
            + _("... grading {done} of {expected} assignments", done=len(self.rows), expected=self.expected)
        )

    def _repr_html_(self) -> str:
        colors = {
            "pass": "var(--jp-success-color1,#2e7d32)",
            "fail": "var(--jp-error-color1,#c62828)",
            "todo": "var(--jp-ui-font-color2,#888)",
        }
        body = []
        for row in self.rows:
            if row.notebook is None or row.problem:
                what = html.escape(row.problem or _(NO_NOTEBOOK))
                body.append(f"<tr><td><b>{row.assignment}</b></td><td colspan=2 style='color:#888'>{what}</td></tr>")
                continue
            chips = " ".join(
                f"<span title='{t.passed_checks}/{t.checks} checks, {t.points:g}/{t.max_points:g} points' "
                f"style='color:{colors[t.status]};white-space:nowrap;margin-right:0.8em'>"
                f"{MARKS[t.status]} {html.escape(t.task)}<span style='color:#888;font-size:smaller'>"
                f"{html.escape(hints_note(t.hints))}</span></span>"
                for t in row.tasks
            )
            body.append(
                f"<tr><td style='white-space:nowrap;vertical-align:top;padding:2px 1.5em 2px 0'><b>{row.assignment}</b><br>"
                "<span style='color:#888'>"
                + html.escape(
                    _(
                        "{passed}/{tasks} tasks, {points:g}/{max_points:g} pts",
                        passed=row.passed,
                        tasks=len(row.tasks),
                        points=row.points,
                        max_points=row.max_points,
                    )
                )
                + "<br>"
                + html.escape(submission_state(row, self.root))
                + f"</span></td><td style='text-align:left'>{chips}</td></tr>"
            )
        if not self.done:
            body.append(
                "<tr><td colspan=2 style='color:#888'>⋯ "
                + html.escape(
                    _("grading {done} of {expected} assignments", done=len(self.rows), expected=self.expected)
                )
                + "</td></tr>"
            )
        return (
            "<div class='grader-progress'><table style='border-collapse:collapse'>"
            + "".join(body)
            + f"</table><div style='color:#888;font-size:smaller'>{html.escape(_(LEGEND))} · "
            + html.escape(heading(self.root))
            + "</div></div>"
        )


def show_progress(root: str | None = None, assignments: list[str] | None = None, timeout: float = 30.0) -> None:
    """The progress table, in a notebook cell (or printed outside one). Save your notebook first."""
    from grader.notebook.display import captured_stderr, in_kernel

    if root is None and GRADED_COPY & set(os.path.abspath(os.getcwd()).split(os.sep)):
        print(_("(the progress overview is for the student's own copy; not run in a submitted or graded one)"))
        return
    root = os.path.abspath(root) if root else find_root(os.getcwd())
    chosen = assignments or exercise_ids()
    view = _ProgressView(root, len(chosen))
    if in_kernel():
        from IPython.display import display

        handle = display(view, display_id=True)
        with captured_stderr():  # nothing on stderr in a notebook cell
            view.rows = course_progress(root, chosen, timeout=timeout, on_assignment=lambda row: handle.update(view))
        view.done = True
        handle.update(view)
    else:
        view.rows = course_progress(root, chosen, timeout=timeout)
        view.done = True
        print(repr(view))
    print(quiz_report(root))  # the lessons' Quick Checks, next to the exercises


# --- python -m grader progress --------------------------------------------------------------


def _main(args) -> int:
    root = os.path.abspath(args.root) if args.root else find_root(os.getcwd())
    if not os.path.isdir(root):
        print(f"error: no such folder: {root}", file=sys.stderr)
        return 2
    if args.json:
        rows = course_progress(root, args.assignment, not args.no_cache, args.timeout)
        print(
            json.dumps(
                {
                    "root": root,
                    "assignments": [
                        {
                            "assignment": r.assignment,
                            "notebook": r.notebook,
                            "problem": r.problem,
                            "cached": r.cached,
                            "tasks": [asdict(t) for t in r.tasks],
                        }
                        for r in rows
                    ],
                    "lessons": [{"lesson": lesson, "quiz": shown} for lesson, shown in lesson_scores(root)],
                },
                ensure_ascii=False,
            )
        )
        return 0
    print(heading(root), flush=True)
    for row in course_progress(
        root,
        args.assignment,
        not args.no_cache,
        args.timeout,
        on_assignment=lambda r: print("\n".join(text_rows(r, root)), flush=True),
    ):
        pass
    print(_(LEGEND))
    print(quiz_report(root))  # the lessons' Quick Checks, next to the exercises
    return 0


def register(sub) -> None:
    parser = sub.add_parser(
        "progress",
        help="which tasks of which assignments pass, from your notebooks",
        description="Which tasks of which assignments pass: the visible checks, run on your "
        "saved notebooks (untouched tasks are skipped, verdicts cached).",
    )
    parser.add_argument(
        "--root",
        default=None,
        help="the folder holding your notebooks (default: the course folder around the current one)",
    )
    parser.add_argument(
        "--assignment", action="append", choices=exercise_ids(), default=None, help="only this assignment (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-cache", action="store_true", help="grade again even if nothing changed")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a run counts as hung")
    parser.set_defaults(func=_main)
