"""Checks of one submission that ask for the same run share one launch; a failed run is never shared.
Real ranks: the launches are counted, not replaced."""

import pytest
import torch

from grader import shared_runs
from grader.checks import CheckFailed, Exercise
from grader.runner import run_checks
from grader.submission import Cell, SourceSubmission

ANSWERS = SourceSubmission(
    [
        Cell(
            "<cell 1>",
            """
import torch.distributed as dist

def fine(x):
    return [x, dist.get_rank()]

def broken(x):
    raise ValueError("broken on purpose")
""",
        )
    ]
)


def _call(ctx, student, name, x):
    return student.task(name)(x)


def make_exercise() -> Exercise:
    ex = Exercise("shared_runs_test", tasks=["fine", "broken"])

    @ex.check("fine", points=1)
    def fine_mutates_what_it_read(g):
        values = g.run(_call, "fine", 1)
        assert values == [[1, 0], [1, 1]], values
        values[0].append("changed by this check")

    @ex.check("fine", points=1)
    def fine_sees_its_own_copy(g):
        if g.run(_call, "fine", 1) != [[1, 0], [1, 1]]:
            raise CheckFailed("saw another check's change")

    @ex.check("fine", points=1)
    def fine_other_argument(g):
        assert g.run(_call, "fine", 2) == [[2, 0], [2, 1]]

    for i in range(2):

        @ex.check("broken", points=1)
        def broken_check(g):
            g.run(_call, "broken", 1)

        ex.checks[-1].name = f"broken_check_{i}"
    return ex


@pytest.fixture(scope="module")
def graded():
    launched = []
    original = shared_runs.run_distributed

    def counted(fn, world_size, args, *rest, **options):
        launched.append(args[2])  # (submission, check's rank function, its arguments)
        return original(fn, world_size, args, *rest, **options)

    shared_runs.run_distributed = counted
    try:
        report = run_checks(make_exercise(), ANSWERS)
    finally:
        shared_runs.run_distributed = original
    return report, launched


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="CPU-only exercise (nccl on 2+ GPUs is not this test)")
def test_same_run_launches_once_and_each_check_gets_its_own_copy(graded):
    report, launched = graded
    results = {c.name: c for c in report.checks}
    assert all(
        results[name].passed for name in ("fine_mutates_what_it_read", "fine_sees_its_own_copy", "fine_other_argument")
    ), [c.message for c in report.checks]
    assert launched.count(("fine", 1)) == 1 and launched.count(("fine", 2)) == 1


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="CPU-only exercise (nccl on 2+ GPUs is not this test)")
def test_failed_run_is_launched_again_for_each_check(graded):
    report, launched = graded
    broken = [c for c in report.checks if c.task == "broken"]
    assert [c.passed for c in broken] == [False, False]
    assert all("broken on purpose" in c.message for c in broken), [c.message for c in broken]
    assert launched.count(("broken", 1)) == 2
