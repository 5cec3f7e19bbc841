"""03_syncbn_sharded, MiniFSDP: the six public checks are judged from one launch of their declared runs (every warm
task under 1 s; build_fsdp2_model's two checks share one run too), and that launch changes no verdict: when it fails,
each check makes its own runs, so a crash in one training run costs only the check that needs that run, with that
run's own message. Real ranks; launches are counted."""

import pytest

from tests.helpers import failed, graded_counting_launches, mutate, solution_source

EXERCISE = "03_syncbn_sharded"
# compute_dtype given: a crash, in the bf16 training run only (every other run builds MiniFSDP(module))
BF16_CRASH = (
    "        self.module, self.compute_dtype = module, compute_dtype\n",
    "        if compute_dtype is not None:\n"
    "            raise RuntimeError('no bfloat16 in this MiniFSDP')\n"
    "        self.module, self.compute_dtype = module, compute_dtype\n",
)


def _graded(source: str):
    """The public MiniFSDP checks of `source`, and the rank functions of the launches they made."""
    return graded_counting_launches(EXERCISE, source, "MiniFSDP", hidden=False)


@pytest.fixture(scope="module")
def solution():
    return _graded(solution_source(EXERCISE))


@pytest.fixture(scope="module")
def bf16_crash():
    return _graded(mutate(solution_source(EXERCISE), *BF16_CRASH))


@pytest.mark.timeout(240)
def test_solution_public_checks_pass_from_one_launch(solution):
    report, launched = solution
    assert len(report.checks) == 6 and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert launched == ["_in_rank_parts"], launched


@pytest.mark.timeout(300)
def test_crash_in_one_run_fails_only_its_check_with_its_message(bf16_crash):
    report, launched = bf16_crash
    messages = failed(report)
    assert set(messages) == {"fsdp_bf16_compute_fp32_masters"}, "\n".join(report.lines())
    assert "no bfloat16 in this MiniFSDP" in messages["fsdp_bf16_compute_fp32_masters"]
    # the failed launch is made once (its failure shared, not relaunched per check), then the checks' own runs: each
    # of the four training runs once (two checks asking for the same run share it), and the memory probe
    assert launched.count("_in_rank_parts") == 1, launched
    assert launched.count("_in_rank_fsdp") == 4 and launched.count("_in_rank_memory") == 1, launched
    assert not any(c.hung for c in report.checks)


@pytest.mark.timeout(240)
def test_build_fsdp2_model_public_checks_pass_from_one_launch():
    """build_fsdp2_model's two public checks judge one build-and-step run (its warm check under 1 s)."""
    report, launched = graded_counting_launches(EXERCISE, solution_source(EXERCISE), "build_fsdp2_model", hidden=False)
    assert len(report.checks) == 2 and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert launched == ["_in_rank_build"], launched
