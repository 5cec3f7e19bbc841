"""The one runner's rules, with real ranks: skipped checks, hangs, side by side, streaming."""

import time

import pytest
import torch

from grader.checks import CheckFailed, CheckSkipped, Exercise
from grader.engine import warm_up
from grader.runner import run_checks
from grader.submission import Cell, SourceSubmission

ANSWERS = SourceSubmission(
    [
        Cell(
            "<cell 1>",
            """
import torch, torch.distributed as dist

def fine():
    return 1

def broken():
    return 2

def hangs():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins
    return 1

def sums_on_rank_0_only():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 goes on to the next step
    return 1
""",
        )
    ]
)

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() >= 2,
    reason="CPU-only: the answers all-reduce CPU tensors; with 2+ GPUs the plan is nccl, which refuses them",
)


def _call(ctx, student, name):
    return student.task(name)()


def make_exercise() -> Exercise:
    ex = Exercise("runner_test", tasks=["fine", "broken", "hangs"])

    @ex.check("fine", points=2)
    def fine_runs(g):
        assert g.run(_call, "fine") == [1, 1]

    @ex.check("fine", points=1)
    def fine_needs_two_gpus(g):
        raise CheckSkipped("needs 2 GPUs, this machine has none")

    @ex.check("broken", points=1)
    def broken_fails(g):
        g.run(_call, "fine")
        raise CheckFailed("a wrong answer")

    @ex.check("broken", points=1)
    def broken_needs_two_gpus(g):
        raise CheckSkipped("needs 2 GPUs, this machine has none")

    for i in range(3):

        @ex.check("hangs", points=1)
        def hang_check(g):
            g.run(_call, "hangs")

        hang_check.__name__ = f"hang_check_{i}"
        ex.checks[-1].name = f"hang_check_{i}"
    return ex


@pytest.fixture(scope="module", autouse=True)
def warm():
    warm_up()


def by_name(report):
    return {c.name: c for c in report.checks}


def test_a_skipped_check_pays_only_beside_a_passing_task():
    report = run_checks(make_exercise(), ANSWERS, tasks=["fine", "broken"])
    checks = by_name(report)
    credited = checks["fine_needs_two_gpus"]
    assert credited.passed and credited.points == 1 and credited.skipped
    assert any("credited because every other check of fine passed" in n for n in credited.notes)
    assert any("credited" in line for line in credited.lines())
    refused = checks["broken_needs_two_gpus"]
    assert not refused.passed and refused.points == 0
    assert "not run on this machine: needs 2 GPUs" in refused.message and "credited only when" in refused.message


def test_a_task_that_hangs_costs_one_timeout_and_shows_its_stack_once():
    start = time.monotonic()
    report = run_checks(make_exercise(), ANSWERS, task="hangs", timeout=3)
    elapsed = time.monotonic() - start
    first, *rest = report.checks
    assert not first.passed and first.hung and "waiting in all_reduce" in first.message
    for other in rest:
        assert not other.passed and "already hung in hang_check_0" in other.message
        assert "hung: waiting in" not in other.message and "stack (most recent" not in other.message  # once
    assert elapsed < 3 * 2 + 20, f"{elapsed:.0f} s: more than about one timeout"


def test_side_by_side_a_hung_run_is_answered_once_and_a_different_run_still_runs():
    ex = make_exercise()

    @ex.check("hangs", points=1)
    def hangs_other_run(g):
        assert g.run(_call, "fine") == [1, 1]  # a different run: it still runs, and passes

    launched = []
    from grader import shared_runs

    original = shared_runs.run_distributed

    def counted(fn, world_size, args, *rest, **options):
        launched.append(args[2])
        return original(fn, world_size, args, *rest, **options)

    shared_runs.run_distributed = counted
    try:
        report = run_checks(ex, ANSWERS, task="hangs", timeout=3, side_by_side=3)
    finally:
        shared_runs.run_distributed = original
    checks = by_name(report)
    assert launched.count(("hangs",)) == 1, launched  # one hang, one timeout
    assert checks["hangs_other_run"].passed
    hung = [checks[f"hang_check_{i}"] for i in range(3)]
    assert all(c.hung and not c.passed and c.points == 0 for c in hung)
    with_stacks = [c for c in hung if "waiting in all_reduce" in c.message]
    assert [c.name for c in with_stacks] == ["hang_check_0"], [c.message for c in hung]  # the stacks shown once
    headline = hung[0].message.splitlines()[0]
    for other in hung[1:]:
        assert other.message.splitlines()[0] == headline  # the same message, without the stacks again
        assert "already hung in hang_check_0" in other.message


def _then_a_bigger_sum(ctx, student):
    student.task("sums_on_rank_0_only")()
    import torch.distributed as dist

    dist.all_reduce(torch.ones(13))  # the next step: rank 0's sum of 1 meets this sum of 13 and gloo aborts
    return 1


def test_a_gloo_abort_names_the_students_line_and_prints_gloos_text_once():
    from grader.notebook.display import CheckView

    ex = Exercise("abort_test", tasks=["sums_on_rank_0_only"])
    for i in range(3):

        @ex.check("sums_on_rank_0_only", points=1)
        def aborts(g):
            g.run(_then_a_bigger_sum)

        ex.checks[-1].name = f"aborts_{i}"
    report = run_checks(ex, ANSWERS, task="sums_on_rank_0_only", timeout=10, side_by_side=3, keep_output=True)
    assert report.score == 0 and all(not c.passed for c in report.checks)
    line = next(i for i, text in enumerate(ANSWERS.cells[0].source.splitlines(), 1) if "goes on to the next" in text)
    for check in report.checks:
        assert f"(your sums_on_rank_0_only, cell 1, line {line})" in check.message, check.message
    shown = "\n".join([c.message for c in report.checks] + [o for c in report.checks for run in c.outputs for o in run])
    assert shown.count("EnforceNotMet") == 1, shown  # gloo's C++ text once: in the first check's rank output
    assert "SIGABRT" in report.checks[0].message and "folded" in report.checks[0].message
    view = CheckView("sums_on_rank_0_only", 3, rich=False)
    view.results = report.checks
    page = view._repr_html_()
    assert page.count("EnforceNotMet") == 1 and '<details style="margin:0 0 4px 2em"><summary' in page  # closed


def _abort_late(ctx) -> None:
    """Make this rank's coming gloo abort reach the launcher only after its peer's "connection closed by peer":
    once gloo's terminate text is in this rank's output, it shuts its sockets (the peer fails at once) while
    its abort waits (sleep(6) as the SIGABRT handler faulthandler chains to, after writing the stacks)."""
    import ctypes
    import faulthandler
    import os
    import signal
    import socket
    import threading

    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    rundir = os.path.dirname(ctx.workdir)
    faulthandler.disable()  # faulthandler chains to the handler it finds when enabled: sleep(6)
    libc.signal(signal.SIGABRT, ctypes.cast(libc.sleep, ctypes.c_void_p).value)  # called with 6: 6 s
    faulthandler.enable(file=open(os.path.join(rundir, f"rank{ctx.rank}.stack"), "a"), all_threads=True)

    def shut_sockets_once_aborting():
        for _ in range(1200):
            with open(os.path.join(rundir, f"rank{ctx.rank}.out"), errors="replace") as f:
                if "terminate called" in f.read():
                    break
            time.sleep(0.05)
        for fd in os.listdir("/proc/self/fd"):
            try:
                sock = socket.socket(fileno=os.dup(int(fd)))
            except OSError:
                continue
            with sock:
                if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    threading.Thread(target=shut_sockets_once_aborting, daemon=True).start()


def _then_a_bigger_sum_aborting_late(ctx, student):
    if ctx.rank == 0:  # the rank whose sum of 1 receives the sum of 13: gloo aborts it
        _abort_late(ctx)
    return _then_a_bigger_sum(ctx, student)


def test_a_gloo_abort_that_arrives_after_the_peers_lost_connection_reads_the_same():
    """Whichever rank's failure reaches the launcher first, the message is the translated one: here rank 1's
    "connection closed by peer" arrives seconds before rank 0's abort, which caused it."""

    def graded(run):
        ex = Exercise("abort_order_test", tasks=["sums_on_rank_0_only"])

        @ex.check("sums_on_rank_0_only", points=1)
        def aborts(g):
            g.run(run)

        report = run_checks(ex, ANSWERS, task="sums_on_rank_0_only", timeout=20)
        assert report.score == 0 and not report.checks[0].passed
        return report.checks[0]

    late, at_once = graded(_then_a_bigger_sum_aborting_late), graded(_then_a_bigger_sum)
    line = next(i for i, text in enumerate(ANSWERS.cells[0].source.splitlines(), 1) if "goes on to the next" in text)
    for check in (late, at_once):
        assert f"(your sums_on_rank_0_only, cell 1, line {line})" in check.message, check.message
        assert "rank 0 exited with signal SIGABRT" in check.message, check.message
        assert "rank 1 raised" not in check.message and "by peer" not in check.message, check.message  # a consequence
    assert late.message.split("\n\n")[0] == at_once.message.split("\n\n")[0]


def test_side_by_side_gives_the_same_results_in_the_same_order():
    seen = []
    one = run_checks(make_exercise(), ANSWERS, tasks=["fine", "broken"])
    many = run_checks(
        make_exercise(), ANSWERS, tasks=["fine", "broken"], side_by_side=3, on_result=lambda r: seen.append(r.name)
    )
    assert [(c.name, c.passed, c.points) for c in one.checks] == [(c.name, c.passed, c.points) for c in many.checks]
    assert seen == [c.name for c in many.checks]


def test_every_result_says_which_plan_it_ran_on():
    report = run_checks(make_exercise(), ANSWERS, task="fine")
    assert report.checks[0].plan.startswith("2 ranks, ")
    assert report.to_json()["checks"][0]["plan"] == report.checks[0].plan


def test_rank_output_is_kept_when_asked():
    printing = SourceSubmission([Cell("<cell 1>", "def fine():\n    print('hello from a rank')\n    return 1\n")])
    ex = make_exercise()
    report = run_checks(ex, printing, task="fine", keep_output=True)
    assert any("hello from a rank" in text for run in report.checks[0].outputs for text in run)


def _one_reason_exercise() -> Exercise:
    ex = Exercise("one_reason_test", tasks=["fine", "broken"])

    @ex.check("broken", points=1)
    def order_is_right(g):
        g.run(_call, "fine")
        raise CheckFailed("the samples come in the same order every epoch: call set_epoch")

    @ex.check("broken", points=1, depends_on=("order_is_right",))
    def result_matches(g):
        raise CheckFailed("weight each batch's loss by its number of samples")  # would blame correct code

    @ex.check("broken", points=1, depends_on=("result_matches",))
    def follows_from_it(g):
        raise CheckFailed("another diagnosis of the same mistake")

    @ex.check("fine", points=1, depends_on=("order_is_right",))
    def passes_anyway(g):
        assert g.run(_call, "fine") == [1, 1]

    return ex


def test_a_check_whose_dependency_failed_points_to_it_and_the_reason_is_said_once():
    report = run_checks(_one_reason_exercise(), ANSWERS, tasks=["broken", "fine"], side_by_side=3)
    checks = by_name(report)
    assert checks["order_is_right"].message.startswith("the samples come in the same order")
    assert checks["result_matches"].message == "depends on `order_is_right`, which failed: fix that first"
    assert checks["result_matches"].points == 0
    assert checks["follows_from_it"].message == "depends on `order_is_right`, which failed: fix that first"  # the root
    assert checks["passes_anyway"].passed  # a dependency changes only a failure's words, never a verdict
    assert "\n".join(report.lines()).count("call set_epoch") == 1


def test_a_dependency_must_be_an_earlier_check():
    ex = Exercise("order_test", tasks=["fine"])
    with pytest.raises(ValueError, match="depends_on names no earlier check"):

        @ex.check("fine", depends_on=("later",))
        def first(g):
            pass
