"""make selfcheck's sandboxed pass: the solution graded through `make grade`'s own path (a course, its sandboxes,
nurseries when root), its score and the plan of every run compared with what this hardware should give."""

from grader import selfcheck
from grader.engine.plan import visible_gpus
from tests.helpers import needs_bwrap


@needs_bwrap
def test_the_sandboxed_pass_grades_the_solution_and_says_the_plan(capsys):
    assert selfcheck.graded_as_make_grade_does("02_ddp_basics")
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "sandboxed (make grade)" in line)
    assert line.startswith("ok ") and "ran on: " in line
    for plan in line.split("ran on: ")[1].split("; "):
        assert plan in selfcheck.expected_plans("02_ddp_basics", visible_gpus())
    if visible_gpus() == 0:
        assert "2 ranks, gloo on CPU (no GPU visible)" in line and "3 ranks, gloo on CPU (no GPU visible)" in line


def test_a_plan_the_hardware_should_not_give_is_not_expected():
    assert "2 ranks, gloo on CPU (no GPU visible)" in selfcheck.expected_plans("02_ddp_basics", 0)
    on_eight = selfcheck.expected_plans("02_ddp_basics", 8)  # each job its own 3 GPUs
    assert "2 ranks, gloo on CPU (no GPU visible)" not in on_eight
    assert any(p.startswith("3 ranks, nccl") for p in on_eight)
