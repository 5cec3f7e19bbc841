"""Hidden check of checks_script_async.py (instructor only): the last checkpoint, whose save the script must wait for
before it exits, loaded at another world size."""

from __future__ import annotations

from grader.exercises.torchrun import script_runs
from grader.exercises.torchrun.checks_script_async import check_order, loaded_checkpoint
from grader.exercises.torchrun.checks_script import EPOCHS, _check_state, _scenario, require_training
from grader.exercises.torchrun import EXERCISE


@EXERCISE.check(
    "train_script",
    points=1,
    hidden=True,
    feedback="Hidden: the last epoch's checkpoint, loaded at 3 ranks (the script must wait for its "
    "last save before it exits).",
)
def train_script_completes_its_last_checkpoint(g):
    """The checkpoint after the last epoch is complete (its future waited for before exit) and loads at 3 ranks
    into the final model."""
    run = _scenario(g, script_runs.linked, EPOCHS, 1)
    require_training(g, run, EPOCHS, "the last checkpoint")
    check_order(run)
    model = loaded_checkpoint(run, EPOCHS - 1, EPOCHS)
    _check_state(
        g,
        model,
        EPOCHS,
        run.seed,
        f"{script_runs.checkpoint(EPOCHS - 1)}, loaded at {script_runs.LOAD_WORKERS} ranks, its model",
        "the last checkpoint holds the final model",
    )
