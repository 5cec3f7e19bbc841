"""make selfcheck (python -m grader selfcheck) on this machine's hardware: CPU in CI.

One run of the CLI grades every exercise's solution, untouched release and typical mistakes, then each solution
again through make grade's sandboxed path. Its --json reports are what the other tests here read, so that those
gradings are paid for once: each solution passes every check of its exercise (the exercise suites' full-marks tests
once graded it again), each untouched release scores 0 (test_lazy_answers.py once did), and each typical mistake
has one reason and its hint first (tests/exercises/test_typical_mistakes.py once graded them again)."""

import json
import re
import subprocess
import sys

import pytest

from grader.instructor import selfcheck
from grader.checks import CheckResult, Report
from grader.engine.plan import current_plan, visible_gpus
from grader.exercises import exercise_ids, get_exercise
from grader.notebook.hints import check_hints, hinter, note_checked
from tests.helpers import ROOT, assert_one_reason, failed


# 581 s in CI, in the module fixture of whichever test comes first; it starts first, beside the serial unit
# (tests/conftest.py LONG_UNITS)
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def selfcheck_run(tmp_path_factory):
    """The CLI's exit, its output, and each graded case: (exercise, label) -> (expectation, Report)."""
    path = tmp_path_factory.mktemp("selfcheck") / "cases.json"
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "selfcheck", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=ROOT,
    )  # the sandboxed pass grades each solution again
    cases = {}
    if path.exists():
        for case in json.loads(path.read_text()):
            report = Report(case["exercise"], [CheckResult(**c) for c in case["report"]["checks"]])
            cases[case["exercise"], case["label"]] = case["expectation"], report
    return proc, cases


def test_selfcheck_passes_on_this_hardware_and_prints_the_plans(selfcheck_run):
    proc, _ = selfcheck_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for world_size in (1, 2, 3):
        assert f"world size {world_size}: {current_plan(world_size).describe()}" in proc.stdout
    graded = [line for line in proc.stdout.splitlines() if line.startswith(("ok ", "BAD"))]
    assert graded and all(line.startswith("ok ") for line in graded)
    for exercise_id in exercise_ids():  # every exercise: its solution and its untouched release
        assert any(exercise_id in line and "solution" in line for line in graded), exercise_id
        assert any(exercise_id in line and "untouched release" in line and " 0/" in line for line in graded)
        assert any(exercise_id in line and "typical mistake in" in line for line in graded), exercise_id
        assert_sandboxed_pass_says_its_plans(graded, exercise_id)
    assert "every score as expected" in proc.stdout


def assert_sandboxed_pass_says_its_plans(graded: list[str], exercise_id: str) -> None:
    """The solution submitted to a course and graded by make grade, sandboxed (nurseries when root): full marks, in
    the sandbox's own /etc, loopback and hostname (04's torchrun workers reach their agent by hostname, 03 writes its
    checkpoints to the private /tmp), each run on a plan this hardware should give. Read from the CLI's run above,
    which grades every exercise so anyway, rather than from a second make grade per exercise (test_sandbox.py grades
    02's class and asserts its results say sandboxed; test_selfcheck_sandboxed.py once graded 02 again)."""
    line = next(line for line in graded if exercise_id in line and "sandboxed (make grade)" in line)
    assert line.startswith("ok ") and "ran on: " in line, line
    score = re.search(r"(\S+)/(\S+)\s+ran on: ", line)
    assert score and float(score[1]) == float(score[2]) == get_exercise(exercise_id).max_score, line
    for plan in line.split("ran on: ")[1].split("; "):
        assert plan in selfcheck.expected_plans(exercise_id, visible_gpus()), line
    if visible_gpus() == 0 and exercise_id == "02_ddp_basics":  # its hidden checks run 3 ranks
        assert "2 ranks, gloo on CPU (no GPU visible)" in line and "3 ranks, gloo on CPU (no GPU visible)" in line


def graded_case(selfcheck_run, exercise_id: str, label: str) -> Report:
    _, cases = selfcheck_run
    assert (exercise_id, label) in cases, f"selfcheck --json wrote no {label!r} of {exercise_id}: {sorted(cases)}"
    return cases[exercise_id, label][1]


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_each_solution_passes_every_check_of_every_task(selfcheck_run, exercise_id):
    """Every check ran, public and hidden (03's 3-rank ones, 04's real torchrun runs and hangs), and passed; each task
    earns its points (a check that cannot run on this hardware says so and is credited beside its passing task)."""
    exercise, report = get_exercise(exercise_id), graded_case(selfcheck_run, exercise_id, "solution")
    assert [c.name for c in report.checks] == [c.name for c in exercise.checks]
    assert failed(report) == {}, "\n".join(report.lines())
    assert {c.hidden for c in report.checks} == {True, False}
    for task in exercise.tasks:
        earned = sum(c.points for c in report.checks if c.task == task)
        assert earned == exercise.points_of(task) > 0, (task, "\n".join(report.lines()))
    assert report.score == report.max_score == exercise.max_score


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_untouched_release_scores_zero(selfcheck_run, exercise_id):
    report = graded_case(selfcheck_run, exercise_id, "untouched release")
    assert [c.name for c in report.checks] == [c.name for c in get_exercise(exercise_id).checks]
    assert report.max_score == get_exercise(exercise_id).max_score
    assert report.score == 0, "\n".join(line for c in report.checks if c.points for line in c.lines())


MISTAKES = [
    (e, selfcheck.mistaken_task(get_exercise(e), old))
    for e in exercise_ids()
    for old, _ in get_exercise(e).typical_mistakes
]


@pytest.mark.parametrize("exercise_id, task", MISTAKES, ids=[f"{e}-{t}" for e, t in MISTAKES])
def test_typical_mistake_has_one_reason_and_its_hint_comes_first(
    selfcheck_run, exercise_id, task, tmp_path, monkeypatch, capsys
):
    """Each typical mistake (EXERCISE.typical_mistakes), graded on its task's checks, hidden ones included: one check
    states the reason, the other failed checks only point to it, and the next hint(task) begins with that check's
    hint."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the hint counts of this test only
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    report = graded_case(selfcheck_run, exercise_id, f"typical mistake in {task}")
    assert {c.name for c in report.checks} == {c.name for c in get_exercise(exercise_id).checks_for(task)}
    assert failed(report), "the typical mistake passed every check:\n" + "\n".join(report.lines())
    first = next(c.name for c in report.checks if not c.passed)  # what the notebook's check(task) notes
    assert_one_reason(report, first)
    note_checked(exercise_id, task, first)
    hinter(exercise_id)(task)
    shown = capsys.readouterr().out
    assert check_hints(exercise_id)[first] in shown and f"`{first}`" in shown, shown


def test_selfcheck_fails_when_a_solution_loses_points(monkeypatch, capsys):
    def a_solution_that_loses_a_point(exercise_id):
        result = CheckResult("a_check", "a_task", False, 0, 1, "wrong on this hardware")
        yield "solution", "full", lambda: Report(exercise_id, [result])

    monkeypatch.setattr(selfcheck, "cases", a_solution_that_loses_a_point)
    assert selfcheck.main(["02_ddp_basics"]) == 1
    out = capsys.readouterr().out
    assert "BAD" in out and "wrong on this hardware" in out and "NOT as expected" in out
