"""What the workers' dcp.async_save calls say (problem.SAVES_ENV), as a verdict (04_torchrun, train_script).

The watch in each worker notes every call in order and stops the script at a save it cannot let run: one on
the training group (its collectives would interleave with DDP's and hang the job) or one started while the
previous future was never waited for (more than one save in flight). Such a run ended early by the grader's
own doing, so every check of the run says why, instead of what the stopped run lacks.
"""

from __future__ import annotations

from grader.checks import CheckFailed

TRAINING_GROUP = (
    "dcp.async_save was called without process_group= (or with the default group): its background save runs "
    "collectives, and on DDP's group they interleave with DDP's all-reduces from the training thread, so the "
    "ranks hang or exchange the wrong data. Create one gloo group for checkpoints (dist.new_group(backend="
    '"gloo")) after init_process_group, and pass process_group= that group to every async_save. The grader '
    "stopped the run at save {number}"
)
IN_FLIGHT = (
    "dcp.async_save was called (save {number}) while the future of the previous save had never been waited "
    "for: at most one save may be in flight. Keep the future async_save returns, call its .result() just "
    "before the next async_save (training goes on meanwhile) and once before the script ends. The grader "
    "stopped the run at that call"
)
MISTAKES = {"on-the-training-group": TRAINING_GROUP, "while-one-in-flight": IN_FLIGHT}


def check_saves(saves: dict[str, list[str]] | None) -> None:
    """Fail with the mistake the watch stopped the run for, if any (RANK -> its events, runs.ScriptRun.saves)."""
    for rank in sorted(saves or {}):
        for line in saves[rank]:
            event, _, number = line.partition(" ")
            if event in MISTAKES:
                raise CheckFailed(f"rank {rank}: " + MISTAKES[event].format(number=number.strip() or "?"))
