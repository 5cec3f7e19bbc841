"""make selfcheck (python -m grader selfcheck) on this machine's hardware: CPU in CI."""

import subprocess
import sys

from grader import selfcheck
from grader.checks import CheckResult, Report
from grader.engine.plan import current_plan
from grader.exercises import MODULES
from tests.helpers import ROOT


def test_selfcheck_passes_on_this_hardware_and_prints_the_plans():
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "selfcheck"], capture_output=True, text=True, timeout=3600, cwd=ROOT
    )  # the sandboxed pass grades each solution again
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for world_size in (1, 2, 3):
        assert f"world size {world_size}: {current_plan(world_size).describe()}" in proc.stdout
    graded = [line for line in proc.stdout.splitlines() if line.startswith(("ok ", "BAD"))]
    assert graded and all(line.startswith("ok ") for line in graded)
    for exercise_id in MODULES:  # every exercise: its solution and its untouched release
        assert any(exercise_id in line and "solution" in line for line in graded), exercise_id
        assert any(exercise_id in line and "untouched release" in line and " 0/" in line for line in graded)
        assert any(exercise_id in line and "typical mistake in" in line for line in graded), exercise_id
    assert "every score as expected" in proc.stdout


def test_selfcheck_fails_when_a_solution_loses_points(monkeypatch, capsys):
    def a_solution_that_loses_a_point(exercise_id):
        result = CheckResult("a_check", "a_task", False, 0, 1, "wrong on this hardware")
        yield "solution", "full", lambda: Report(exercise_id, [result])

    monkeypatch.setattr(selfcheck, "cases", a_solution_that_loses_a_point)
    assert selfcheck.main(["02_ddp_basics"]) == 1
    out = capsys.readouterr().out
    assert "BAD" in out and "wrong on this hardware" in out and "NOT as expected" in out
