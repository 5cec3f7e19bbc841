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


def resumed_at(epochs: int, p: int, batch: int) -> tuple:
    """Resumed from a snapshot at progress p, but at `batch` of its epoch (0: the epoch's start, trained
    twice up to p; p's own batch: right; one more: a batch skipped)."""
    full = uninterrupted(epochs)
    return full[:p] + full[p // STEPS * STEPS + batch :]


def from_epoch_start(epochs: int, p: int) -> tuple:
    """Resumed at the first batch of the snapshot's epoch: its first batches trained twice."""
    return resumed_at(epochs, p, 0)


def offset_forgotten(epochs: int, p: int) -> tuple:
    """Resumed with the right number of steps left in the epoch, taken from the start of its order."""
    full = uninterrupted(epochs)
    epoch, batch = divmod(p, STEPS)
    return full[:p] + tuple((epoch, j) for j in range(STEPS - batch)) + full[(epoch + 1) * STEPS :]


def skipped_in_later_epochs(epochs: int, p: int) -> tuple:
    """Resumed at the right batch, but every later epoch skips its first batches_run batches too."""
    full = uninterrupted(epochs)
    epoch, batch = divmod(p, STEPS)
    return full[: (epoch + 1) * STEPS] + tuple(
        step for later in range(epoch + 1, epochs) for step in full[later * STEPS + batch : (later + 1) * STEPS]
    )


def epochs_renumbered(epochs: int, p: int) -> tuple:
    """Resumed at the right batch, but each resumed epoch shuffled as if it were the restart's first, second...
    (sampler.set_epoch(epoch - epochs_run), or the loop's own count): the permutations of epochs 0, 1, ..."""
    first = p // STEPS
    return uninterrupted(epochs)[:p] + tuple((epoch - first, batch) for epoch, batch in uninterrupted(epochs)[p:])


def snapshots_before(kill_step: int) -> range:
    """The progress of every snapshot a resume in the kill's epoch may have started from."""
    return range(kill_step // STEPS * STEPS, kill_step + 1)


def faulty(epochs: int, kill_step: int) -> dict[str, tuple]:
    """Every faulty mid-epoch resume from a snapshot taken in the kill's epoch before the kill:
    what an epoch-level resume that loads model, optimizer and epoch right may still do."""
    first = kill_step // STEPS * STEPS + 1
    found = {}
    for p in range(first, kill_step + 1):
        for batch in range(STEPS):
            if batch != p % STEPS:
                found[f"resumed_at_batch_{batch}@{p}"] = resumed_at(epochs, p, batch)
        found[f"offset_forgotten@{p}"] = offset_forgotten(epochs, p)
        found[f"skipped_in_later_epochs@{p}"] = skipped_in_later_epochs(epochs, p)
    return found
