"""Load test: the 02 checks that ask "does rank 0 wait for the others?" (cleanup,
save_checkpoint) give the same verdict every time while both cores are busy,
because they rest on happens-before evidence, not on sleeps or durations."""

import subprocess
import sys

import pytest

from tests.helpers import failed, grade_source, mutate, solution_source

EXERCISE = "02_ddp_basics"
# The rule: with both cores busy, every one of 30 correct runs gets full marks and every one of 30 mistaken runs is
# caught (about 95 s on 2 cores).
RUNS = 30
MUTANT_RUNS = 30
ORDER_CHECKS = [
    "cleanup_waits_then_destroys",
    "checkpoint_written_by_rank0_only",
    "checkpoint_has_unwrapped_keys",
    "checkpoint_complete_before_return",
]
BURN_S = 300  # each burner exits by itself after this, even if the test is killed

pytestmark = pytest.mark.load


@pytest.fixture
def busy_cores():
    """Two processes spinning for as long as the test runs: both cores of this machine stay busy.
    The grader's worker pool is warmed first, so its one-off start is not counted among the runs."""
    grade_source(EXERCISE, solution_source(EXERCISE), checks=ORDER_CHECKS[:1])
    code = f"import time\nend = time.monotonic() + {BURN_S}\nwhile time.monotonic() < end:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in burners:
            proc.kill()
        for proc in burners:
            proc.wait(timeout=10)


def test_correct_cleanup_and_save_get_full_marks_every_time_under_load(busy_cores):
    source = solution_source(EXERCISE)
    lost = []
    for run in range(RUNS):
        report = grade_source(EXERCISE, source, checks=ORDER_CHECKS)
        if report.score != report.max_score:
            lost.append((run, failed(report)))
    assert not lost, f"{len(lost)} of {RUNS} runs lost points: {lost[:3]}"


def test_missing_barriers_are_caught_every_time_under_load(busy_cores):
    source = mutate(
        solution_source(EXERCISE),
        "    dist.barrier()\n    dist.destroy_process_group()",
        "    dist.destroy_process_group()",
    )
    source = mutate(
        source,
        "        torch.save(model.module.state_dict(), path)\n    dist.barrier()",
        "        torch.save(model.module.state_dict(), path)",
    )
    expected = {
        "cleanup_waits_then_destroys": "call dist.barrier() before",
        "checkpoint_complete_before_return": "before rank 0 had finished writing",
    }
    missed = []
    for run in range(MUTANT_RUNS):
        messages = failed(grade_source(EXERCISE, source, checks=list(expected)))
        missed += [
            (run, name, messages.get(name)) for name, phrase in expected.items() if phrase not in messages.get(name, "")
        ]
    assert not missed, f"{len(missed)} misses in {MUTANT_RUNS} runs: {missed[:3]}"
