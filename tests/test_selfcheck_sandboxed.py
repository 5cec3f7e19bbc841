"""make selfcheck's sandboxed pass: the solution graded through `make grade`'s own path (a course, its sandboxes,
nurseries when root), its score and the plan of every run compared with what this hardware should give.

The pass itself is graded by tests/test_selfcheck.py's run of `python -m grader selfcheck`, which makes it for every
exercise (assert_sandboxed_pass_says_its_plans); grading 02's solution a second time here cost a make grade."""

from grader.instructor import selfcheck


def test_a_plan_the_hardware_should_not_give_is_not_expected():
    assert "2 ranks, gloo on CPU (no GPU visible)" in selfcheck.expected_plans("02_ddp_basics", 0)
    on_eight = selfcheck.expected_plans("02_ddp_basics", 8)  # each job its own 3 GPUs
    assert "2 ranks, gloo on CPU (no GPU visible)" not in on_eight
    assert any(p.startswith("3 ranks, nccl") for p in on_eight)
