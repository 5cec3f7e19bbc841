"""make selfcheck's typical mistakes: one per exercise, each still in its solution (fast: no grading run)."""

import pytest

from grader import selfcheck
from grader.exercises import MODULES, get_exercise
from grader.submission import read_notebook
from tests.helpers import ROOT


@pytest.mark.parametrize("exercise_id", sorted(MODULES))
def test_each_exercise_has_a_typical_mistake_found_once_in_its_solutions_answers(exercise_id):
    exercise = get_exercise(exercise_id)
    assert exercise.typical_mistake, f"{exercise_id}: no EXERCISE.typical_mistake in its hidden modules"
    old, _ = exercise.typical_mistake
    answers = "\n\n".join(c.source for c in read_notebook(f"{ROOT}/{exercise.notebook}").cells)
    assert answers.count(old) == 1, f"{old!r} is in the answers {answers.count(old)} times"
    assert selfcheck.mistaken_task(exercise, old) in exercise.tasks  # only that task's checks are graded


def test_a_mistake_the_solution_lost_is_reported_not_graded(monkeypatch, capsys):
    monkeypatch.setattr(get_exercise("02_ddp_basics"), "typical_mistake", ("a line no solution holds", "pass"))
    with pytest.raises(selfcheck.StaleMistake):
        list(selfcheck.cases("02_ddp_basics"))
    assert selfcheck._grade_cases("02_ddp_basics") == 1
    assert "BAD 02_ddp_basics's typical mistake is no longer in its solution's answers" in capsys.readouterr().out


def test_an_exercise_without_a_typical_mistake_says_so(monkeypatch, capsys):
    monkeypatch.setattr(get_exercise("02_ddp_basics"), "typical_mistake", None)
    assert [label for label, _, _ in selfcheck.cases("02_ddp_basics")] == ["solution", "untouched release"]
    monkeypatch.setattr(selfcheck, "cases", lambda exercise_id: iter(()))
    assert selfcheck._grade_cases("02_ddp_basics") == 0
    assert "02_ddp_basics" in (out := capsys.readouterr().out) and "no typical mistake to grade" in out
