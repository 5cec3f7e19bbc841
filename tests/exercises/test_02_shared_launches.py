"""02_ddp_basics graded whole: the public runs of every task that declares them share one launch, the hidden runs
another (grader/shared_runs.py), and that changes no verdict: a check that fails on a shared
launch's values is run again on its own, and that run decides. Real ranks; launches are counted."""

import pytest

from tests.helpers import graded_counting_launches, mutate, solution_source

EXERCISE = "02_ddp_basics"
# the runs of the tasks that declare none: they start or end the process group, or bound a hang themselves
OWN_LAUNCHES = ["_in_rank_cleanup", "_in_rank_setup", "_in_rank_setup_on_simulated_gpus", "_in_rank_uneven"]
# pick_backend right, but it leaves a global forward hook behind that scales every module's output: every later run
# in the same ranks computes wrong values; in a run of its own, no other task's code ever sees it
LEAKY_BACKEND = (
    '    return "nccl" if torch.cuda.is_available() else "gloo"\n',
    "    torch.nn.modules.module.register_module_forward_hook(\n"
    "        lambda module, inputs, output: output * 1.01 if isinstance(output, torch.Tensor) else None)\n"
    '    return "nccl" if torch.cuda.is_available() else "gloo"\n',
)


def _graded(source: str, hidden: bool, task: str | None = None):
    """The checks of `source` (every task, or one), public or hidden, and the rank functions of their launches."""
    return graded_counting_launches(EXERCISE, source, task, hidden)


@pytest.mark.timeout(300)
def test_a_whole_submission_makes_one_launch_for_its_shared_runs():
    report, launched = _graded(solution_source(EXERCISE), hidden=False)
    assert report.checks and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert launched.count("_in_rank_parts") == 1, launched
    assert sorted(name for name in launched if name != "_in_rank_parts") == OWN_LAUNCHES, launched


@pytest.mark.timeout(300)
def test_the_hidden_checks_of_a_submission_share_one_launch():
    report, launched = _graded(solution_source(EXERCISE), hidden=True)
    assert len(report.checks) == 4 and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert launched == ["_in_rank_parts"], launched


@pytest.mark.timeout(600)
def test_what_one_tasks_code_leaves_in_the_ranks_costs_no_other_task_a_point():
    source = mutate(solution_source(EXERCISE), *LEAKY_BACKEND)
    whole, launched = _graded(source, hidden=False)
    assert all(c.passed for c in whole.checks), "\n".join(whole.lines())
    assert "_in_rank_parts" in launched and "_in_rank_wrap" in launched, launched  # failures seen, then confirmed
    by_task = {}
    for task in dict.fromkeys(c.task for c in whole.checks):
        alone, _ = _graded(source, hidden=False, task=task)
        by_task.update({c.name: (c.passed, c.message) for c in alone.checks})
    assert {c.name: (c.passed, c.message) for c in whole.checks} == by_task
