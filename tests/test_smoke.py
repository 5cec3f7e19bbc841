"""The fast tier's real runs (`make test-fast`): for every exercise, one task of its solution graded by real
multi-process runs (separate OS processes, a real process group), through the same runner as the CLI, the notebook
and `make grade`; and the CLI end to end on one task. The whole suites of each exercise are in tests/exercises/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.exercises import exercise_ids, get_exercise
from tests.helpers import ROOT, failed, grade_source, solution_notebook, solution_source

# One task per exercise whose public checks start ranks (a task that only inspects a value would prove nothing):
# an exercise's first task, or the one named here where the first starts none (a new exercise's scaffold starts
# with a task that runs ranks: nothing to add here).
FIRST_TASK_STARTS_NO_RANKS = {
    "01_parallelism": "average_gradients",
    "02_ddp_basics": "setup",
    "03_syncbn_sharded": "partition_parameters",
}
TASK_WITH_RUNS = {e: FIRST_TASK_STARTS_NO_RANKS.get(e) or get_exercise(e).tasks[0] for e in exercise_ids()}


def test_every_exercise_has_a_smoke_task():
    for exercise_id, task in TASK_WITH_RUNS.items():
        assert task in get_exercise(exercise_id).tasks, (exercise_id, task)


@pytest.mark.parametrize("exercise_id", sorted(TASK_WITH_RUNS))
def test_one_task_of_each_solution_gets_full_marks_from_real_runs(exercise_id):
    task = TASK_WITH_RUNS[exercise_id]
    report = grade_source(exercise_id, solution_source(exercise_id), task=task)
    ran = [c for c in report.checks if c.task == task and not c.skipped]
    assert ran and failed(report) == {}, "\n".join(report.lines())
    if exercise_id != "04_torchrun":  # exercise 4's checks start real torchrun agents, not the engine's ranks
        assert all(c.plan for c in ran), "a check with no plan ran no ranks"


def test_the_cli_grades_one_task_of_a_notebook():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "check",
            "02_ddp_basics",
            solution_notebook("02_ddp_basics"),
            "--task",
            "setup",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["checks"] and all(c["passed"] for c in report["checks"] if c["task"] == "setup"), report
