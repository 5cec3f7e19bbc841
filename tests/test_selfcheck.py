"""make selfcheck (python -m grader selfcheck) on this machine's hardware: CPU in CI."""

import re
import subprocess
import sys

import pytest

from grader import selfcheck
from grader.checks import CheckResult, Report
from grader.engine.plan import current_plan, visible_gpus
from grader.exercises import exercise_ids, get_exercise
from tests.helpers import ROOT


@pytest.mark.timeout(1500)  # 376 s in CI; it starts first, beside the serial unit (tests/conftest.py LONG_UNITS)
def test_selfcheck_passes_on_this_hardware_and_prints_the_plans():
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "selfcheck"], capture_output=True, text=True, timeout=3600, cwd=ROOT
    )  # the sandboxed pass grades each solution again
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


def test_selfcheck_fails_when_a_solution_loses_points(monkeypatch, capsys):
    def a_solution_that_loses_a_point(exercise_id):
        result = CheckResult("a_check", "a_task", False, 0, 1, "wrong on this hardware")
        yield "solution", "full", lambda: Report(exercise_id, [result])

    monkeypatch.setattr(selfcheck, "cases", a_solution_that_loses_a_point)
    assert selfcheck.main(["02_ddp_basics"]) == 1
    out = capsys.readouterr().out
    assert "BAD" in out and "wrong on this hardware" in out and "NOT as expected" in out
