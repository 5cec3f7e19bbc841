"""hint("task"): a ladder of 2-3 hints for every task of every exercise (found by discovery, so a new task
without hints fails here), revealed in order, never an answer cell's code, counted per student, shown in the
progress view. No process is started: the progress view is given an untouched release (nothing to grade)."""

import json
import os
import re
import shutil
import textwrap

import pytest

from grader import cells
from grader.exercises import exercise_ids
from grader.notebook.hints import (
    UnknownTask,
    check_hints,
    hinter,
    hints_used,
    ladders,
    note_checked,
    state_path,
    tasks_of,
)
from tests.helpers import ROOT

MIN_LINE = 21  # a solution line this long never appears verbatim in a hint
MIN_STATEMENT = 12  # nor a solution region's statement this long, compared without spaces
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def notebook_cells(folder: str, exercise_id: str) -> list:
    with open(os.path.join(ROOT, folder, exercise_id, f"{exercise_id}.ipynb"), encoding="utf-8") as f:
        return json.load(f)["cells"]


def solution_answers(exercise_id: str) -> dict[str, str]:
    return {
        task: cells.source(cell) for task, cell in cells.answer_cells(notebook_cells("solutions", exercise_id)).items()
    }


def region_statements(source: str) -> list[str]:
    """The lines between BEGIN and END SOLUTION, comments and a block's colon dropped, spaces removed."""
    found = []
    for region in re.findall(re.escape(BEGIN) + r"(.*?)" + re.escape(END), source, flags=re.S):
        for line in textwrap.dedent(region).splitlines():
            code = line.split("  # ")[0].strip().removesuffix(":")
            if code and not code.startswith("#"):
                found.append(re.sub(r"\s+", "", code))
    return [s for s in found if len(s) >= MIN_STATEMENT]


def squeezed(text: str) -> str:
    return re.sub(r"[\s`]+", "", text)


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    return tmp_path


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_task_has_a_ladder_of_two_or_three(exercise_id):
    tasks, found = tasks_of(exercise_id), ladders(exercise_id)
    missing = [t for t in tasks if t not in found]
    assert not missing, f"{exercise_id}: no hints for {missing} (add them to its hints.py)"
    assert not set(found) - set(tasks), f"{exercise_id}: hints for tasks it does not have: {set(found) - set(tasks)}"
    for task, ladder in found.items():
        assert 2 <= len(ladder) <= 3, f"{exercise_id}/{task}: {len(ladder)} hints, want 2 or 3"
        assert all(isinstance(h, str) and len(h.strip()) >= 40 for h in ladder), f"{exercise_id}/{task}: an empty hint"
        assert len(set(ladder)) == len(ladder), f"{exercise_id}/{task}: the same hint twice"
        glued = [h for h in ladder if re.search(r"[a-z)]\.[A-Z]", re.sub(r"`[^`]*`", "", h))]
        assert not glued, f"{exercise_id}/{task}: two hints glued into one (a missing comma in the list?): {glued}"


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_no_hint_holds_an_answer_cells_code(exercise_id):
    answers = solution_answers(exercise_id)
    assert set(answers) == set(tasks_of(exercise_id)), "every task has an answer cell in the solution"
    every_hint = [(task, h) for task, ladder in ladders(exercise_id).items() for h in ladder]
    every_hint += [(check, h) for check, h in check_hints(exercise_id).items()]
    for task, source in answers.items():
        lines = [ln.strip() for ln in source.splitlines() if len(ln.strip()) >= MIN_LINE]
        statements = region_statements(source)
        assert statements, f"{exercise_id}/{task}: no solution region found to compare with"
        for hint_task, text in every_hint:  # any task's hint: none may give away another's line either
            for line in lines:
                assert line not in text and squeezed(line) not in squeezed(text), (
                    f"{exercise_id}/{hint_task}: a hint holds the solution line {line!r} of {task}"
                )
            for statement in statements:
                assert statement not in squeezed(text), (
                    f"{exercise_id}/{hint_task}: a hint holds the solution statement {statement!r} of {task}"
                )


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_public_check_carries_a_hint_of_its_own(exercise_id):
    """hint(task) after a failed check begins with that check's hint: each check a student sees has one."""
    from grader.exercises import get_exercise

    checks = get_exercise(exercise_id).checks
    mine = check_hints(exercise_id)
    missing = [c.name for c in checks if not c.hidden and c.name not in mine]
    assert not missing, f"{exercise_id}: no CHECK_HINTS entry for {missing} (its hints.py)"
    assert not set(mine) - {c.name for c in checks}, f"{exercise_id}: hints for unknown checks"
    assert all(len(h.strip()) >= 40 for h in mine.values())


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_hints_are_not_in_the_notebooks(exercise_id):
    """Kept out of the student's view until asked: no hint's text is in the release or the solution."""
    text = "".join(
        cells.source(c) for folder in ("exercises", "solutions") for c in notebook_cells(folder, exercise_id)
    )
    for ladder in ladders(exercise_id).values():
        for h in ladder:
            assert h[:60] not in text


def test_hint_reveals_in_order_persists_and_says_when_none_is_left(state, capsys):
    exercise_id = exercise_ids()[0]
    task = tasks_of(exercise_id)[0]
    ladder = ladders(exercise_id)[task]
    hint = hinter(exercise_id)
    for i, text in enumerate(ladder[:-1], 1):
        hint(task)
        shown = capsys.readouterr().out
        assert f"Hint {i} of {len(ladder)}" in shown and text in shown
        assert all(later not in shown for later in ladder[i:]), "a later hint shown too early"
        assert hints_used(exercise_id) == {task: i}
    hint = hinter(exercise_id)  # a new kernel: the count persists in the state file
    hint(task)
    shown = capsys.readouterr().out
    assert ladder[-1] in shown and "last" in shown
    hint(task)
    shown = capsys.readouterr().out
    assert "No hint left" in shown and all(text in shown for text in ladder), "the end repeats the whole ladder"
    assert hints_used(exercise_id) == {task: len(ladder)}
    assert os.path.dirname(os.path.dirname(state_path())) == str(state / "state")


def test_unknown_task_names_the_tasks_and_counts_nothing(state, capsys):
    exercise_id = exercise_ids()[0]
    tasks = tasks_of(exercise_id)
    with pytest.raises(UnknownTask) as raised:
        hinter(exercise_id)(tasks[0][:-1])  # a typo
    assert all(t in str(raised.value) for t in tasks) and "did you mean" in str(raised.value)
    assert not os.path.exists(state_path())
    hinter(exercise_id)()  # no task: the list of tasks, with the hints seen of each
    shown = capsys.readouterr().out
    assert all(f"`{t}` (0/{len(ladders(exercise_id)[t])})" in shown for t in tasks)
    with pytest.raises(KeyError, match="the exercises are"):
        hinter("no_such_exercise")


def test_a_broken_state_file_or_an_nbgrader_run_never_fails(state, capsys, monkeypatch):
    exercise_id = exercise_ids()[0]
    task = tasks_of(exercise_id)[0]
    os.makedirs(os.path.dirname(state_path()))
    with open(state_path(), "w") as f:
        f.write("{not json")
    hinter(exercise_id)(task)
    assert "Hint 1 of" in capsys.readouterr().out and hints_used(exercise_id) == {task: 1}
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # nbgrader runs the notebook: nothing shown or counted
    hinter(exercise_id)(task)
    assert capsys.readouterr().out == "" and hints_used(exercise_id) == {task: 1}


def test_progress_view_shows_hints_used_per_task(state, monkeypatch):
    from grader.progress import course_progress
    from grader.progress.view import _ProgressView, text_report

    monkeypatch.setenv("XDG_CACHE_HOME", str(state / "cache"))
    exercise_id = exercise_ids()[0]
    first, second = tasks_of(exercise_id)[:2]
    root = state / "course"
    folder = root / "exercises" / exercise_id
    folder.mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "exercises", exercise_id, f"{exercise_id}.ipynb"), folder)  # untouched: no run
    hint = hinter(exercise_id)
    hint(first), hint(first), hint(second)
    for use_cache in (False, True, True):  # the count is read fresh, also when the verdicts come from the cache
        rows = course_progress(str(root), [exercise_id], use_cache=use_cache)
        assert {t.task: t.hints for t in rows[0].tasks if t.hints} == {first: 2, second: 1}
    report = text_report(rows, str(root))
    assert f"{first} (2 hints)" in report and f"{second} (1 hint)" in report
    view = _ProgressView(str(root), 1)
    view.rows, view.done = rows, True
    assert "(2 hints)" in view._repr_html_() and "(1 hint)" in view._repr_html_()


def test_the_hint_of_the_check_that_failed_comes_first_then_the_ladder(state, capsys):
    from grader.notebook import hints

    hints._failing_here.clear()  # this process's record: a fresh kernel
    exercise_id, task = "02_ddp_basics", "train_one_epoch"
    ladder, mine = ladders(exercise_id)[task], check_hints(exercise_id)["train_calls_set_epoch"]
    note_checked(exercise_id, task, "train_calls_set_epoch")  # what check(task) notes when that check fails
    hinter(exercise_id)(task)
    shown = capsys.readouterr().out
    assert "`train_calls_set_epoch`" in shown and mine in shown and ladder[0] not in shown
    assert hints_used(exercise_id) == {}  # the ladder's count is not used up by it
    hints._failing_here.clear()
    hint = hinter(exercise_id)  # a new kernel: the state file says it was shown
    note_checked(exercise_id, task, "train_calls_set_epoch")  # the same check failing again: not shown again
    hint(task)
    shown = capsys.readouterr().out
    assert "Hint 1 of" in shown and ladder[0] in shown and mine not in shown
    note_checked(exercise_id, task, "loss_is_global_mean")  # another mistake now: its hint first
    hint(task)
    assert check_hints(exercise_id)["loss_is_global_mean"] in capsys.readouterr().out
    note_checked(exercise_id, task, None)  # all pass: nothing noted, the ladder goes on
    hint(task)
    assert "Hint 2 of" in capsys.readouterr().out and hints_used(exercise_id) == {task: 2}
