"""What students call: check("task") and hint("task") inside a notebook.

    from grader.notebook import checker
    check = checker("02_ddp_basics")
    check("wrap_model")          # ✓/✗ per check; AssertionError when any fails
    hint = hinter("02_ddp_basics")
    hint("wrap_model")           # the task's next hint (hints.py)

The code checked is what is defined in the kernel *now* (serialized by value),
not the saved file, so the same line works while editing and as an nbgrader
test cell.

The checks run through grader.runner.run_checks (like the CLI and `make grade`),
up to SIDE_BY_SIDE at once; display.py shows them (one rich output per
cell, nothing on stderr).

The package:
    __init__.py   checker(): check("task"), and hinter re-exported (every notebook's first cell imports both)
    display.py    the ✓ or ✗ of each check and its reason, as the notebook shows them
    hints.py      hint("task"): the failing check's hint, then the task's ladder, counted per student
"""

from __future__ import annotations

import json
import os
import sys
import threading

from grader import cells
from grader.engine import gpu_exclusive, warm_up
from grader.engine.processes import preload
from grader.exercises import find, get_exercise
from grader.notebook.hints import hinter, note_checked  # noqa: F401 (the notebook imports check and hint from here)
from grader.i18n import _, ngettext
from grader.notebook.display import CheckView, captured_stderr, in_kernel
from grader.submission import from_namespace

# Nothing above imports torch: checker() starts the forkserver (which imports torch by itself)
# before this process imports torch with the checks, so the two imports share the 2 cores
# instead of following each other (grader.runner and the check modules import torch).


def checker(exercise_id: str, world_size: int = 2, timeout: float = 30.0):
    modules = find(exercise_id).public  # an unknown id fails here, before anything starts
    try:  # the notebook's first cell starts the engine, so that the first check() finds it warm
        start_forkserver(modules)  # first: it imports torch and the checks beside this process
    except Exception:  # noqa: BLE001 - only a head start: the first check() starts it again and shows why
        pass
    exercise = get_exercise(exercise_id)  # imports torch here, beside the forkserver's own import
    earned: dict[tuple[str, bool], float] = {}  # (task, hidden) -> points, for nbgrader's partial credit

    def check(task: str, hidden: bool = False, namespace: dict | None = None) -> float | None:
        checks = exercise.checks_for(task, hidden)  # ValueError naming the tasks for a typo
        from grader.runner import SIDE_BY_SIDE, run_checks  # imported by get_exercise already

        ns = namespace if namespace is not None else vars(sys.modules["__main__"])
        in_hidden = 0 if hidden else hidden_points(exercise, task)  # said under the visible ones
        view = CheckView(task, len(checks), rich=in_kernel(), hidden_points=in_hidden)
        serialize = exclusive_gpus()  # one check at a time, one notebook at a time (engine/gpu_exclusive.py)
        with captured_stderr() as stray, gpu_exclusive.one_at_a_time(serialize):
            _warm_parent()
            submission = from_namespace(ns, exercise.tasks)
            report = run_checks(
                exercise,
                submission,
                task=task,
                hidden=hidden,
                world_size=world_size,
                timeout=timeout,
                on_result=view.add,
                side_by_side=1 if serialize else SIDE_BY_SIDE,
                keep_output=True,
            )
        view.finish(stray.text())
        start_warming()  # after the first check, not before: until it, the cores are the forkserver's
        failed = [r.name for r in report.checks if not r.passed]
        if not hidden and not os.environ.get("NBGRADER_EXECUTION"):
            note_checked(exercise_id, task, failed[0] if failed else None)  # its hint comes first (hints.py)
        reasons = _reasons([r for r in report.checks if not r.passed])
        earned[task, hidden] = report.score
        if os.environ.get("NBGRADER_EXECUTION") == "autograde":
            # nbgrader's autograde reads a number as the cell's partial credit: the task's points so
            # far (the hidden tests' call comes last in the cell, so it returns visible + hidden)
            return _Points(earned.get((task, False), 0) + earned.get((task, True), 0))
        if failed:
            # The reasons in full here too: nbgrader's Validate shows this text alone, not the view above.
            raise ChecksFailed(
                ngettext(
                    "{task}: {failed} of {n} check failed ({names})",
                    "{task}: {failed} of {n} checks failed ({names})",
                    len(report.checks),
                    task=task,
                    failed=len(failed),
                    names=", ".join(failed),
                )
                + "".join(reasons)
            ) from None
        # nothing returned: the last line of a cell would print it under the ✓ lines

    return check


REASON_LINES = 8  # of a failed check's message in the cell's error (its summary: a hang's stacks come after)


def hidden_points(exercise, task: str, folder: str = ".") -> float:
    """The task's points in hidden checks: from the checks where they are installed (the instructor's grader),
    else from the check cell of the exercise's notebook in `folder` (a student's: hidden checks left out, the
    cell's points are the task's total); 0 when neither is known."""
    # (c.hidden, not hidden=True: tests/test_student_install.py reads that keyword as a hidden check)
    known = sum(c.points for c in exercise.checks_for(task) if c.hidden)
    if known:
        return known
    try:
        with open(os.path.join(folder, f"{exercise.id}.ipynb"), encoding="utf-8") as f:
            cell = cells.check_cells(json.load(f).get("cells", [])).get(task)
    except (OSError, ValueError, AttributeError):
        return 0
    public = sum(c.points for c in exercise.checks_for(task) if not c.hidden)
    return max(0.0, cells.check_points(cell) - public) if cell else 0


def exclusive_gpus() -> bool:
    """GPUs in exclusive-process compute mode, and this notebook's ranks may use some: its checks go one at a time."""
    from grader.engine.plan import visible_gpus

    return gpu_exclusive.exclusive_process() and visible_gpus() > 0


def _reason(result, said: set[str] | None = None) -> str:
    """A failed check's name and why, for the error that ends its cell (the summary of a long message): its first
    line in full, then the lines an earlier check's reason did not already say (`said`, updated: checks answered
    by the same hang)."""
    lines = result.message.split("\n\n", 1)[0].splitlines()
    if said is not None and lines:
        fresh = [line for line in lines[1:] if line not in said]
        said.update(lines)
        lines = lines[:1] + fresh
    shown = lines[:REASON_LINES] + (["..."] if len(lines) > REASON_LINES else [])
    return f"\n- {result.name}: " + "\n  ".join(shown or [_("failed")])


def _reasons(failed_results) -> list[str]:
    said: set[str] = set()
    return [_reason(r, said) for r in failed_results]


class _Points(float):
    def __repr__(self) -> str:
        return f"{float(self):g}"


class ChecksFailed(AssertionError):
    """Some check of the task failed (nbgrader then gives the check cell 0 points)."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows these lines instead of a traceback through the grader: the
        # grader's frames would only bury the reasons.
        return [f"\x1b[31mAssertionError\x1b[0m: {self}"]


_warming: threading.Thread | None = None  # the kernel's own share of the warm-up, started by checker()


def start_forkserver(check_modules=()) -> None:
    """Start the engine's forkserver (a process that imports torch and the checks by itself,
    about 3 s; it exits when this process does: the engine's own teardown). It imports
    check_modules too (an exercise's public checks: named before it starts, or every rank
    imports them itself). Its output goes to the kernel's log, never to a cell (a stderr
    stream costs an nbgrader test cell its points)."""
    preload(check_modules)
    with captured_stderr():  # its fds 1 and 2 are the kernel's log, for good
        warm_up()


def start_warming() -> None:
    """Import, in a daemon thread, what the kernel needs for a check (torch._dynamo and friends,
    about 2 CPU-s, otherwise paid by the first check whose reference steps an optimizer), without
    blocking the cell; the next check() joins it. Started when the first check ends: before it,
    these imports would take the cores from the forkserver the first check waits for (the first
    check imports what its own reference needs, if anything)."""
    global _warming
    if _warming is None:
        _warming = threading.Thread(target=_import_preload, name="grader-warm-up", daemon=True)
        _warming.start()


def _import_preload() -> None:
    try:
        import grader.engine.preload  # noqa: F401
    except BaseException:  # noqa: BLE001 - raised again by _warm_parent, in the check that needs it
        pass


def _warm_parent() -> None:
    """Inside a check's output capture (what starting prints is captured): the forkserver started
    by checker() (or now, if that failed: the error is then the check's), and the warm-up thread,
    if a check started it, joined (no import of this check runs beside the thread's)."""
    start_forkserver()
    if _warming is not None:
        _warming.join()
        import grader.engine.preload  # noqa: F401  (imported by the thread; raises here if that failed)
