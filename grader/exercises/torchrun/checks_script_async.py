"""Checks of 04_torchrun, train_script's asynchronous checkpoints (torch.distributed.checkpoint, async_save).

They read the plain run (script_runs.linked, shared with train_script_matches_single_process). In that run the model
carries the grader's marker in its state (problem.GATE_ENV): the first time a background thread writes it, the
write is held until the training thread starts its next step, and the marker writes down the order of events.
The verdict is that order (the write began, the next step began, then the write went on and completed), never a
duration. The checkpoints are then loaded by the grader's loader (dcp_load.py) at script_runs.LOAD_WORKERS ranks, not
the 2 that saved them, and compared with the single-process reference.
"""

from __future__ import annotations

from grader.checks import CheckFailed
from grader.exercises.torchrun import script_runs
from grader.exercises.torchrun.checks_script import EPOCHS, _check_state, _scenario, require_training
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.output_evidence import evidence

SAVE = (
    'after each epoch every rank calls dcp.async_save({"app": state}, checkpoint_id=f"{args.checkpoints}/'
    'epoch_{epoch}", process_group=a gloo group of its own), where `state` is a Stateful whose state_dict() '
    'returns {"model": ..., "optimizer": ..., "epochs_run": epoch + 1}, the first two from '
    "get_state_dict(model, optimizer)"
)


def _events(run: script_runs.ScriptRun) -> list[str]:
    return [line.split()[0] for lines in (run.gate or {}).values() for line in lines if line.split()]


def check_order(run: script_runs.ScriptRun) -> None:
    """The held write's events say the next training step began while the checkpoint was being written."""
    events = _events(run)
    if "training-waits-for-the-future" in events:
        raise CheckFailed(
            "the checkpoint after epoch 0 was being written in the background, but the training "
            "thread waited for its future (.result()) before its next step: training did not go on "
            "while the snapshot was written. Keep the future and wait for it only before the next "
            "async_save, and once before the script ends"
        )
    if "gave-up" in events:
        raise CheckFailed(
            "the checkpoint after epoch 0 was being written in the background, and no training step "
            "began while it was: the script must go on training right after dcp.async_save returns"
        )
    if "next-step-began" in events:
        return
    if not isinstance(run.loaded, dict):
        raise CheckFailed(
            f"no checkpoint under --checkpoints {script_runs.CHECKPOINTS}: {SAVE}\n"
            + evidence(run.output, run.timed_out)
        )
    raise CheckFailed(
        "the checkpoint was written by the training thread, not in the background: dcp.save (or any "
        "save that returns only once the files are written) stops training until the snapshot is on "
        f"disk. Start it with dcp.async_save and go on training; {SAVE} (the model's own "
        "state_dict, as get_state_dict returns it)"
    )


def loaded_checkpoint(run: script_runs.ScriptRun, epoch: int, epochs_run: int) -> dict:
    """The model the grader's loader read from the checkpoint of `epoch` at script_runs.LOAD_WORKERS ranks."""
    name = script_runs.checkpoint(epoch)
    loaded = run.loaded.get("loaded", {}).get(name) if isinstance(run.loaded, dict) else None
    if not isinstance(loaded, dict):
        raise CheckFailed(
            f"the grader could not load {name} at {script_runs.LOAD_WORKERS} ranks (its loader wrote "
            f"{str(run.loaded)[:150]})\n" + evidence(run.output, run.timed_out)
        )
    error = loaded.get("error")
    if error == "missing":
        raise CheckFailed(f"no checkpoint at {name}: {SAVE}")
    if error == "incomplete":
        raise CheckFailed(
            f"{name} has no .metadata: its save never completed. Wait for each async_save's future "
            "before starting the next one, and for the last one before the script ends"
        )
    if error:
        raise CheckFailed(f"{name} could not be loaded at {script_runs.LOAD_WORKERS} ranks: {error[:300]}. {SAVE}")
    if loaded.get("epochs_run") != epochs_run:
        raise CheckFailed(
            f"{name}, loaded at {script_runs.LOAD_WORKERS} ranks, says epochs_run={loaded.get('epochs_run')!r}"
            f", expected {epochs_run} (an int: the epochs completed)"
        )
    return loaded["model"]


@EXERCISE.check("train_script", points=2)
def train_script_checkpoints_while_training_goes_on(g):
    """The plain run (2 workers, 3 epochs): the checkpoint after epoch 0 is written by dcp.async_save while
    training goes on (the next step begins before the save completes, by the order of events), and it loads at
    3 ranks into the model trained for one epoch."""
    run = _scenario(g, script_runs.linked, EPOCHS, 1)
    require_training(g, run, EPOCHS, "an asynchronous checkpoint")
    check_order(run)
    model = loaded_checkpoint(run, 0, 1)
    _check_state(
        g,
        model,
        1,
        run.seed,
        f"{script_runs.checkpoint(0)}, loaded at {script_runs.LOAD_WORKERS} ranks, its model",
        "the checkpoint after epoch 0 holds the model as trained up to then",
    )
