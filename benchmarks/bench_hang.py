"""Benchmark: how long a student waits for a task whose answer hangs.

    make bench     (or: .venv/bin/python benchmarks/bench_hang.py [--repeats N] [--strict])

The student's mistake: exercise 2's save_checkpoint with its barrier inside `if rank == 0:` (rank 0 waits
in a barrier rank 1 never calls). Its check cell runs the task's checks as the notebook does
(grader.runner.run_checks, side by side, the notebook's 30 s timeout). Every check of the task asks for
the same run, so the task costs one timeout, not one per check: target one timeout plus a few seconds
(TARGET_S). The verdict itself never rests on the duration: each check fails because the run hung.
Also printed: whether the message names the student's line (cell and line) and shows the stacks once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from grader.engine import warm_up  # noqa: E402
from grader.exercises import get_exercise  # noqa: E402
from grader.grading import Grading  # noqa: E402
from grader.runner import SIDE_BY_SIDE, run_checks  # noqa: E402
from grader.submission import Cell, SourceSubmission, read_notebook  # noqa: E402

EXERCISE, TASK = "02_ddp_basics", "save_checkpoint"
TIMEOUT_S = 30.0  # the notebook's (grader.notebook.checker)
TARGET_S = 35.0  # one timeout plus a few seconds
MISTAKE = """def save_checkpoint(model, path):
    rank = dist.get_rank()
    if rank == 0:
        torch.save(model.module.state_dict(), path)
        dist.barrier()
"""


if __name__ != "__main__":  # imported (a test): the ranks get this module's KernelAnswers by value
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


class KernelAnswers(SourceSubmission):
    """Answers whose definitions are known without a run, as in the notebook's kernel (a live namespace)."""

    def __init__(self, cells, defined):
        super().__init__(cells)
        self.defined = defined

    def known_definitions(self):
        return self.defined


def mistaken_answers() -> tuple[SourceSubmission, str]:
    """The solution's answer cells with save_checkpoint's cell replaced by the mistake, their definitions known
    beforehand as in a kernel; and that cell's name."""
    solution = read_notebook(os.path.join(ROOT, "solutions", EXERCISE, f"{EXERCISE}.ipynb"))
    cells, name = [], ""
    for cell in solution.cells:
        if cell.source.lstrip().startswith("def save_checkpoint"):
            cell, name = Cell(cell.filename, MISTAKE), cell.filename
        cells.append(cell)
    assert name, "no save_checkpoint answer cell in the solution"
    loaded = Grading(SourceSubmission(cells), 1, TIMEOUT_S)
    loaded.preflight()  # what the answers define: known in a kernel before any check runs
    assert loaded.load_report is not None, loaded.load_failure
    return KernelAnswers(cells, loaded.load_report), name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args()
    warm_up()
    answers, cell = mistaken_answers()
    exercise = get_exercise(EXERCISE)
    worst = 0.0
    for _ in range(args.repeats):
        start = time.monotonic()
        report = run_checks(
            exercise, answers, task=TASK, timeout=TIMEOUT_S, side_by_side=SIDE_BY_SIDE, keep_output=True
        )
        seconds = time.monotonic() - start
        worst = max(worst, seconds)
        messages = [c.message for c in report.checks]
        hung = sum(c.hung and not c.passed for c in report.checks)
        number = cell.strip("<>").replace("cell ", "")
        names_line = any(f"cell {number}, line" in m for m in messages)
        stacks = sum(" hung: waiting in " in m or " hung: busy in " in m for m in messages)
        print(
            f"hang of {TASK} (exercise 2, `if rank == 0: dist.barrier()`), {len(report.checks)} checks: "
            f"{seconds:.1f} s (target {TARGET_S:.0f} s: {'ok' if seconds <= TARGET_S else 'MISSED'}); "
            f"{hung} answered as hung, 0 points each: {report.score == 0}; names the student's cell and line: "
            f"{names_line}; stacks shown in {stacks} check(s)"
        )
    return 1 if args.strict and worst > TARGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
