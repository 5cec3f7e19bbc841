"""02_ddp_basics, MiniDDP: the public checks' four runs are made in one launch (grader/shared_runs.py:
fewer launches per submission), and that launch changes no verdict: when it fails, each check makes its
own run, so a crash in one run costs only the checks that need that run, with that run's own message. A hidden
check's run stays its own. Real ranks; launches are counted."""

import pytest

from tests.helpers import failed, graded_counting_launches, mutate, solution_source

EXERCISE = "02_ddp_basics"
HOOK_ON_FROZEN = ("            if param.requires_grad:\n", "            if True:\n")  # fails the frozen-model run only


def _graded(source: str, hidden: bool = False):
    """MiniDDP's public (or hidden) checks of `source`, and the rank functions of the launches they made."""
    return graded_counting_launches(EXERCISE, source, "MiniDDP", hidden)


@pytest.mark.timeout(240)
def test_solution_public_checks_pass_from_one_launch():
    report, launched = _graded(solution_source(EXERCISE))
    assert len(report.checks) == 3 and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert launched == ["_in_rank_parts"], launched


@pytest.mark.timeout(240)
def test_a_hidden_checks_run_is_its_own():
    report, launched = _graded(solution_source(EXERCISE), hidden=True)
    assert report.checks and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert launched == ["_in_rank_mini_vs_ddp"], launched


@pytest.mark.timeout(300)
def test_crash_in_one_run_fails_only_its_check_with_its_message():
    report, launched = _graded(mutate(solution_source(EXERCISE), *HOOK_ON_FROZEN))
    messages = failed(report)
    assert set(messages) == {"mini_ddp_frozen_and_tied_parameters"}, "\n".join(report.lines())
    assert "frozen parameter" in messages["mini_ddp_frozen_and_tied_parameters"]
    # the failed launch is made once (its failure shared, not relaunched per check), then each check's own runs
    assert launched.count("_in_rank_parts") == 1, launched
    assert launched.count("_in_rank_mini_broadcast") == 1 and launched.count("_in_rank_mini_vs_ddp") == 2, launched
    assert not any(c.hung for c in report.checks)
