"""How far a snapshot got, and the steps a faulty resume takes (04_torchrun, train_script).

A step is (epoch, batch); a run of E epochs takes problem.STEPS_PER_EPOCH of them per epoch.
A snapshot says how far training got with "epochs_run" (epochs completed) and "batches_run"
(batches of the next epoch already trained); its progress is the number of steps before it.
The schedules below are what a restart from a snapshot at progress p trains, right and wrong;
the checks compare the final model with the reference trained on each (reference.py).
"""
from __future__ import annotations

from grader.exercises.torchrun import problem
from grader.exercises.torchrun.reference import uninterrupted

STEPS = problem.STEPS_PER_EPOCH


def progress(snapshot) -> int | None:
    """Steps trained before `snapshot` was taken; None when it does not say (no int batches_run)."""
    if not isinstance(snapshot, dict):
        return None
    epochs, batches = snapshot.get("epochs_run"), snapshot.get("batches_run")
    if type(epochs) is not int or type(batches) is not int or not 0 <= batches < STEPS or epochs < 0:
        return None
    return epochs * STEPS + batches


def where(step: int) -> str:
    epoch, batch = divmod(step, STEPS)
    return f"epoch {epoch}, batch {batch}"


def from_epoch_start(epochs: int, p: int) -> tuple:
    """Resumed at the first batch of the snapshot's epoch: its first batches trained twice."""
    full = uninterrupted(epochs)
    return full[:p] + full[p // STEPS * STEPS:]


def offset_forgotten(epochs: int, p: int) -> tuple:
    """Resumed with the right number of steps left in the epoch, taken from the start of its order."""
    full = uninterrupted(epochs)
    epoch, batch = divmod(p, STEPS)
    return full[:p] + tuple((epoch, j) for j in range(STEPS - batch)) + full[(epoch + 1) * STEPS:]


def faulty(epochs: int, kill_step: int) -> dict[str, tuple]:
    """Every faulty mid-epoch resume from a snapshot taken in the kill's epoch before the kill:
    what an epoch-level resume that loads model, optimizer and epoch right may still do."""
    first = kill_step // STEPS * STEPS + 1
    found = {}
    for p in range(first, kill_step + 1):
        found[f"from_epoch_start@{p}"] = from_epoch_start(epochs, p)
        found[f"offset_forgotten@{p}"] = offset_forgotten(epochs, p)
    return found
