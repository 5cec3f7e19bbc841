"""Checks of one submission that ask for the same run share one launch; a failed run is never shared; the runs an
exercise declares are answered from one launch, and when that launch fails each check makes its own run.
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


def graded_counting(exercise: Exercise) -> tuple:
    """The report of `exercise` on ANSWERS, and (rank function, its arguments) of each launch, in order."""
    launched = []
    original = shared_runs.run_distributed

    def counted(fn, world_size, args, *rest, **options):
        launched.append((args[1].__name__, args[2]))  # (submission, check's rank function, its arguments)
        return original(fn, world_size, args, *rest, **options)

    shared_runs.run_distributed = counted
    try:
        report = run_checks(exercise, ANSWERS)
    finally:
        shared_runs.run_distributed = original
    return report, launched


@pytest.fixture(scope="module")
def graded():
    report, launched = graded_counting(make_exercise())
    return report, [args for _fn, args in launched]


def declaring_exercise(broken_declared: bool) -> Exercise:
    """Two checks of `fine` and one of `broken`, each asking g.run for a run the exercise declared."""
    ex = Exercise("declared_runs_test", tasks=["fine", "broken"])
    ex.declare_runs("fine", ((_call, ("fine", 1)), (_call, ("fine", 2))))
    ex.declare_runs("broken", ((_call, ("broken" if broken_declared else "fine", 3)),))

    @ex.check("fine", points=1)
    def fine_one(g):
        assert g.run(_call, "fine", 1) == [[1, 0], [1, 1]]

    @ex.check("fine", points=1)
    def fine_two(g):
        assert g.run(_call, "fine", 2) == [[2, 0], [2, 1]]

    @ex.check("broken", points=1)
    def broken_three(g):
        g.run(_call, "broken" if broken_declared else "fine", 3)

    return ex


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="CPU-only exercise (nccl on 2+ GPUs is not this test)")
def test_declared_runs_of_every_task_are_answered_from_one_launch():
    report, launched = graded_counting(declaring_exercise(broken_declared=False))
    assert all(c.passed for c in report.checks), [c.message for c in report.checks]
    assert [fn for fn, _args in launched] == ["_in_rank_parts"], launched


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="CPU-only exercise (nccl on 2+ GPUs is not this test)")
def test_a_failed_shared_launch_counts_for_nothing_each_check_makes_its_own_run():
    report, launched = graded_counting(declaring_exercise(broken_declared=True))
    passed = {c.name: c.passed for c in report.checks}
    assert passed == {"fine_one": True, "fine_two": True, "broken_three": False}, [c.message for c in report.checks]
    assert "broken on purpose" in report.checks[-1].message
    # the failed launch of all three runs once (its failure shared), then fine's own two parts together, which pass
    assert [fn for fn, _args in launched] == ["_in_rank_parts", "_in_rank_parts", "_call"], launched


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
