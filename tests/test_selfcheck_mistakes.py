"""make selfcheck's typical mistakes: at least one per exercise, at most one per task, each still in its solution
(fast: no grading run)."""

import pytest

from grader.instructor import selfcheck
from grader.exercises import exercise_ids, get_exercise
from grader.submission import read_notebook
from tests.helpers import ROOT


@pytest.mark.parametrize("exercise_id", sorted(exercise_ids()))
def test_each_typical_mistake_is_found_once_in_its_solutions_answers(exercise_id):
    exercise = get_exercise(exercise_id)
    assert exercise.typical_mistakes, f"{exercise_id}: no EXERCISE.typical_mistakes in its hidden modules"
    answers = "\n\n".join(c.source for c in read_notebook(f"{ROOT}/{exercise.notebook}").cells)
    tasks = []
    for old, _ in exercise.typical_mistakes:
        assert answers.count(old) == 1, f"{old!r} is in the answers {answers.count(old)} times"
        tasks.append(selfcheck.mistaken_task(exercise, old))  # only that task's checks are graded
    assert len(tasks) == len(set(tasks)), f"{exercise_id}: two typical mistakes in one task: {tasks}"
    assert set(tasks) <= set(exercise.tasks)


def test_every_task_of_the_new_axes_has_its_typical_mistake():
    declared = {
        selfcheck.mistaken_task(get_exercise(e), old)
        for e in exercise_ids()
        for old, _ in get_exercise(e).typical_mistakes
    }
    assert {"moe_layer", "ring_attention", "build_hsdp_model", "plan_layout", "plan_memory"} <= declared


def test_a_mistake_the_solution_lost_is_reported_not_graded(monkeypatch, capsys):
    monkeypatch.setattr(get_exercise("02_ddp_basics"), "typical_mistakes", [("a line no solution holds", "pass")])
    with pytest.raises(selfcheck.StaleMistake):
        list(selfcheck.cases("02_ddp_basics"))
    assert selfcheck._grade_cases("02_ddp_basics") == 1
    assert "BAD 02_ddp_basics's typical mistake is no longer in its solution's answers" in capsys.readouterr().out


def test_an_exercise_without_a_typical_mistake_says_so(monkeypatch, capsys):
    monkeypatch.setattr(get_exercise("02_ddp_basics"), "typical_mistakes", [])
    assert [label for label, _, _ in selfcheck.cases("02_ddp_basics")] == ["solution", "untouched release"]
    monkeypatch.setattr(selfcheck, "cases", lambda exercise_id: iter(()))
    assert selfcheck._grade_cases("02_ddp_basics") == 0
    assert "02_ddp_basics" in (out := capsys.readouterr().out) and "no typical mistake to grade" in out


def test_each_typical_mistake_is_its_own_case():
    labels = [label for label, _, _ in selfcheck.cases("01_parallelism")]
    assert [x for x in labels if x.startswith("typical mistake in ")] == [
        f"typical mistake in {selfcheck.mistaken_task(get_exercise('01_parallelism'), old)}"
        for old, _ in get_exercise("01_parallelism").typical_mistakes
    ]
