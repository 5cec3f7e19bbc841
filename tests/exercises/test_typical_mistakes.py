"""Each typical mistake of an exercise (EXERCISE.typical_mistakes, what make selfcheck grades): one check states the
reason, the other failed checks only point to it, and the next hint(task) begins with that check's hint."""

from __future__ import annotations

import pytest

from grader.exercises import get_exercise
from grader.hints import check_hints, hinter, note_checked
from grader.selfcheck import mistaken_task
from tests.helpers import assert_one_reason, failed, grade_source, mutate, solution_source

# exercise -> graded with its hidden checks too (exercise 1's hidden 3-stage run, the costliest, is graded on the same
# mistake by tests/exercises/test_01_schedule.py, which asserts one reason with it); exercise 2's: test_02_*.py
EXERCISES = {"01_parallelism": False, "03_syncbn_sharded": True, "04_torchrun": True}


MISTAKES = [(e, old, new) for e in EXERCISES for old, new in get_exercise(e).typical_mistakes]


@pytest.mark.parametrize(
    "exercise_id, old, new", MISTAKES, ids=[f"{e}-{mistaken_task(get_exercise(e), o)}" for e, o, _ in MISTAKES]
)
def test_typical_mistake_has_one_reason_and_its_hint_comes_first(exercise_id, old, new, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the hint counts of this test only
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    exercise = get_exercise(exercise_id)
    task = mistaken_task(exercise, old)
    checks = [c.name for c in exercise.checks_for(task, hidden=None if EXERCISES[exercise_id] else False)]
    source = mutate(solution_source(exercise_id), old, new)
    report = grade_source(exercise_id, source, task=task, timeout=60, checks=checks)
    bad = failed(report)
    assert bad, "the typical mistake passed every check:\n" + "\n".join(report.lines())
    first = next(c.name for c in report.checks if not c.passed)  # what the notebook's check(task) notes
    assert_one_reason(report, first)
    note_checked(exercise_id, task, first)
    hinter(exercise_id)(task)
    shown = capsys.readouterr().out
    assert check_hints(exercise_id)[first] in shown and f"`{first}`" in shown, shown
