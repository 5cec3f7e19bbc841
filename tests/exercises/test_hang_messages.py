"""Hang messages: the check's own hang analysis is what the student reads, never gloo's raw
"Timed out waiting ...ms"; a rank busy in the student's own code is named, with where, and the others
are said to wait for it. Real 2-rank runs of exercise 02."""

import re

from tests.helpers import (
    BARRIER_ON_RANK_0_ONLY,
    failed,
    failure_of,
    grade_source,
    mutate,
    replace_definition,
    solution_source,
)

EX = "02_ddp_basics"
GLOO_TIMEOUT = "Timed out waiting"


def test_train_uneven_without_join_reads_as_the_hang_analysis():
    source = mutate(solution_source(EX), "    with Join([model]):", "    if True:")
    message = failure_of(EX, source, "train_uneven", "uneven_finishes_without_hang", timeout=30)
    assert "Join" in message and "hung" in message, message
    assert "rank 0 hung: waiting in" in message, message  # where rank 0 waits, from its stack
    assert GLOO_TIMEOUT not in message, message


def test_gloo_timeout_of_a_group_of_the_students_own_is_reported_as_a_hang():
    wrap = """
    def wrap_model(model, device):
        import datetime
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        group = dist.new_group(timeout=datetime.timedelta(seconds=1))  # gloo gives up long before the check
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1), group=group)  # rank 1 never joins
        return DDP(model.to(device))
    """
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    message = failure_of(EX, source, "wrap_model", "wrap_model_broadcasts_rank0_parameters", timeout=8)
    assert message.startswith("the run did not finish in time"), message
    assert "rank 0 hung: waiting in" in message and "gloo's own timeout" in message, message
    assert "rank 1 hung: waiting in" in message, message  # in DDP's broadcast, which rank 0 never reaches
    assert GLOO_TIMEOUT not in message, message


def test_a_rank_busy_in_the_students_loop_is_named_and_the_others_wait_for_it():
    wrap = """
    def wrap_model(model, device):
        import time
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        rank = dist.get_rank()
        while rank == 1:  # waits for something that never comes
            time.sleep(0.01)
        return DDP(model.to(device))
    """
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    message = failure_of(EX, source, "wrap_model", "wrap_model_broadcasts_rank0_parameters")
    heading = message.splitlines()[0]
    assert "rank 1 is busy in your code at" in heading and "the others wait for it" in heading, message
    assert "time.sleep(0.01)" in heading or "while rank == 1" in heading, message  # the student's line
    assert "different collectives" not in message, message
    assert "rank 0 hung: waiting in" in message, message  # rank 0 waits in DDP's broadcast


def test_every_rank_busy_in_the_students_code():
    wrap = """
    def wrap_model(model, device):
        while True:
            pass
    """
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    message = failure_of(EX, source, "wrap_model", "wrap_model_broadcasts_rank0_parameters")
    assert "every rank is busy in your code" in message.splitlines()[0], message
    assert "rank 0 hung: busy in your code at" in message and "rank 1 hung: busy in your code at" in message


# --- the hang or mismatch in the student's terms: which collective, in which line of theirs ---------------------


def _line_of(source: str, code: str) -> int:
    """The line number of the student's line holding `code` (its last occurrence: the mutated definition)."""
    numbers = [i for i, line in enumerate(source.splitlines(), start=1) if code in line]
    assert numbers, code
    return numbers[-1]


def _names_the_line(message: str, function: str, line: int) -> None:
    divergence = message.split("\n\n", 1)[0]  # what is said before any rank's details
    assert f"your {function}, submission.py, line {line})" in divergence, message
    assert "/work/" not in message and "site-packages" not in message, message  # paths relative, never absolute
    assert message.count("terminate called after throwing") <= 1, message  # gloo's C++ text at most once


def test_exercise_1_a_reduce_on_rank_0_only_names_the_students_line():
    source = mutate(
        solution_source("01_parallelism"),
        "        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)\n",
        "        if dist.get_rank() == 0:\n"
        "            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)  # rank 1 never joins\n",
    )
    message = failure_of("01_parallelism", source, "average_gradients", "averaged_gradients_match_full_batch")
    _names_the_line(message, "average_gradients", _line_of(source, "rank 1 never joins"))
    assert "that rank 1 never called in your code" in message, message


def test_exercise_1_gradients_reduced_in_another_order_on_one_rank_name_the_students_line():
    """gloo aborts one rank and the other loses its connection: whichever the launcher hears first, the message
    is the translated one (the lost connection is never shown as the failure)."""
    source = mutate(
        solution_source("01_parallelism"),
        "    for param in model.parameters():\n",
        "    params = list(model.parameters())\n"
        "    for param in (params[::-1] if dist.get_rank() == 1 else params):  # another order\n",
    )
    message = failure_of("01_parallelism", source, "average_gradients", "averaged_gradients_match_full_batch")
    line = _line_of(source, "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)")
    _names_the_line(message, "average_gradients", line)
    assert "by peer" not in message, message


def test_exercise_2_a_barrier_on_rank_0_only_names_the_students_line_once_per_task():
    source = replace_definition(solution_source(EX), "save_checkpoint", BARRIER_ON_RANK_0_ONLY)
    report = grade_source(EX, source, task="save_checkpoint", timeout=5)
    bad = failed(report)
    assert len(bad) == len(report.checks) and report.score == 0
    line = _line_of(source, "only rank 0 waits")
    first, *others = bad.values()
    _names_the_line(first, "save_checkpoint", line)
    assert "that rank 1 never called in your code; rank 1 had gone on to the next step" in first, first
    for message in others:  # the reason once per run: the others give its headline and point to it
        assert message.splitlines()[0] == first.splitlines()[0] and len(message.splitlines()) == 2, message
        assert "already hung in" in message and "never called in your code" not in message, message
    assert sum("rank 0 hung: waiting in" in m for m in bad.values()) == 1, bad  # the stacks shown once


def test_exercise_2_an_all_reduce_on_rank_0_only_before_ddp_names_the_students_line():
    wrap = """
    def wrap_model(model, device):
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))  # rank 1 goes straight to DDP
        return DDP(model.to(device))
    """
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    message = failure_of(EX, source, "wrap_model", "wrap_model_broadcasts_rank0_parameters")
    _names_the_line(message, "wrap_model", _line_of(source, "rank 1 goes straight to DDP"))
    assert f"your wrap_model, submission.py, line {_line_of(source, 'return DDP(model.to(device))')})" in message


def test_exercise_3_global_stats_reduced_on_rank_0_only_name_the_students_line():
    source = mutate(
        solution_source("03_syncbn_sharded"),
        "        dist.all_reduce(total, op=dist.ReduceOp.SUM)\n",
        "        if dist.get_rank() == 0:\n"
        "            dist.all_reduce(total, op=dist.ReduceOp.SUM)  # rank 1 skips the sum\n",
    )
    message = failure_of("03_syncbn_sharded", source, "global_batch_stats", "stats_of_the_concatenated_batch")
    _names_the_line(message, "forward", _line_of(source, "rank 1 skips the sum"))


def test_exercise_3_global_stats_of_different_sizes_name_the_students_line():
    source = mutate(
        solution_source("03_syncbn_sharded"),
        "        dist.all_reduce(total, op=dist.ReduceOp.SUM)\n",
        "        if dist.get_rank() == 1:\n"
        "            total = torch.cat([total, total])  # rank 1 sums twice as much\n"
        "        dist.all_reduce(total, op=dist.ReduceOp.SUM)  # sizes differ\n",
    )
    message = failure_of("03_syncbn_sharded", source, "global_batch_stats", "stats_of_the_concatenated_batch")
    _names_the_line(message, "forward", _line_of(source, "sizes differ"))
    assert "by peer" not in message, message


# Exercise 4 runs the student's script under real torchrun, in processes of their own: no collective recorder is
# read there. A worker gloo aborts prints its stack (PYTHONFAULTHANDLER), and a hung one is sent SIGABRT to print
# it before it is killed, so the message names the script's line where each worker stood (train.py, line N).
EX4_SNAPSHOT = """        if rank == 0:  # one writer (global rank 0, not LOCAL_RANK 0 on every node)
            save_atomically({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "epochs_run": epochs_done, "batches_run": batches_done}, args.snapshot)
"""


def _ex4_message(source: str) -> str:
    return failure_of("04_torchrun", source, "train_script", "train_script_matches_single_process", timeout=30)


def _script_line(source: str, code: str) -> int:
    script = source.split("train_script = '''", 1)[1]
    return next(
        i for i, line in enumerate(script.splitlines(), start=1) if code in line
    )  # line 1: after the opening quotes


def test_exercise_4_a_barrier_on_rank_0_only_names_the_scripts_line(monkeypatch):
    from grader.exercises.torchrun import script_runs

    monkeypatch.setattr(script_runs, "RUN_TIMEOUT_S", 25.0)  # the hang's bound, not a verdict: the run is killed
    source = mutate(
        solution_source("04_torchrun"), EX4_SNAPSHOT, EX4_SNAPSHOT + "            dist.barrier()  # only rank 0 waits\n"
    )
    message = _ex4_message(source)
    line = _script_line(source, "only rank 0 waits")
    assert f"train.py, line {line}, in save_snapshot" in message, message
    assert "where the workers were in your script" in message, message


def test_exercise_4_sums_of_different_sizes_name_the_scripts_line():
    source = mutate(
        solution_source("04_torchrun"),
        EX4_SNAPSHOT,
        EX4_SNAPSHOT + "        dist.all_reduce(torch.ones(1 if rank == 0 else 13))  # sizes differ\n",
    )
    message = _ex4_message(source)
    line = _script_line(source, "sizes differ")
    assert f"train.py, line {line}, in save_snapshot" in message, message
    assert message.count("terminate called after throwing") <= 1, message


def test_a_collective_one_rank_skips_is_said_as_such_with_ddps_own_and_the_rank_condition():
    """Rank 0's `dist.all_reduce(totals)` under `if dist.get_rank() == 0` meets rank 1's next gradient all-reduce,
    the one DDP runs inside `loss.backward()`: two different calls paired up, not a shape mismatch."""
    source = mutate(
        solution_source(EX),
        "    dist.all_reduce(totals)\n",
        "    if dist.get_rank() == 0:\n        dist.all_reduce(totals)\n",
    )
    message = failure_of(EX, source, "train_one_epoch", "train_calls_set_epoch", timeout=10)
    said = message.split("\n\n", 1)[0]
    mine = source[: source.index("def save_checkpoint")]  # train_one_epoch and what comes before it
    skipped, condition = _line_of(mine, "        dist.all_reduce(totals)"), _line_of(mine, "if dist.get_rank() == 0:")
    backward = _line_of(mine, "loss.backward()")
    assert f"`dist.all_reduce(totals)` (your train_one_epoch, submission.py, line {skipped})" in said, message
    assert "the gradient all-reduce DDP runs inside `" in said and f"submission.py, line {backward})" in said, message
    assert f"line {skipped} (`dist.all_reduce(totals)`) runs only where `dist.get_rank() == 0` is True" in said
    assert f"(line {condition})" in said, message
    assert "different sizes" not in said and "earlier" not in said, message
    before = re.search(r"rank 1 made (\d+) calls in your code before this one", said)  # "earlier" made concrete
    assert before and int(before[1]) > 0, message
    _names_the_line(message, "train_one_epoch", skipped)


def test_a_notebook_cells_line_is_quoted_with_its_rank_condition():
    """Answers read from a notebook's cells (as `python -m grader check notebook.ipynb`; the kernel's in
    tests/test_browser.py): the cells exist only in the ranks and the parent, which quotes them from what the
    submission registered."""
    import copy

    from grader.exercises import get_exercise
    from grader.runner import run_checks
    from grader.submission import Cell, SourceSubmission

    exercise = copy.copy(get_exercise(EX))
    exercise.checks = [c for c in exercise.checks if c.name == "train_calls_set_epoch"]
    source = solution_source(EX)
    skipping = mutate(
        source, "    dist.all_reduce(totals)\n", "    if dist.get_rank() == 0:\n        dist.all_reduce(totals)\n"
    )
    report = run_checks(exercise, SourceSubmission([Cell("<cell 21>", skipping)]), task="train_one_epoch", timeout=10)
    said = failed(report)["train_calls_set_epoch"].split("\n\n", 1)[0]
    skipped = _line_of(skipping, "        dist.all_reduce(totals)")
    condition = skipped - 1  # the `if` just above it
    assert f"`dist.all_reduce(totals)` (your train_one_epoch, cell 21, line {skipped})" in said, said
    assert "the gradient all-reduce DDP runs inside `loss.backward()` (your train_one_epoch, cell 21, line " in said
    assert f"`dist.get_rank() == 0` is True (line {condition})" in said, said


def test_the_source_of_a_line_and_the_rank_conditions_around_it():
    import linecache

    from grader.engine.source_lines import code_at, rank_conditions

    code = "def f(x, rank):\n    if rank == 0:\n        g(x)  # '#' in a comment\n    else:\n        h(x)\n    while ctx.rank > 1:\n        k()\n"
    linecache.cache["<cell 99>"] = (len(code), None, code.splitlines(True), "<cell 99>")
    assert code_at("<cell 99>", 3) == "g(x)"
    assert rank_conditions("<cell 99>", 3) == [(2, "rank == 0", True)]
    assert rank_conditions("<cell 99>", 5) == [(2, "rank == 0", False)]
    assert rank_conditions("<cell 99>", 7) == [(6, "ctx.rank > 1", True)]
    assert rank_conditions("<cell 99>", 1) == [] and code_at("<cell 98>", 1) == ""
