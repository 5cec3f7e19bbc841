"""Exercise 04_torchrun, train_script with --snapshot-every: a resume mid-epoch starts at the next batch.

One crash run per script, real torchrun (the grader stops the workers at a step it draws, kills one,
torchrun restarts both). Each mid-epoch mistake keeps the epoch-level resume check's points (model,
optimizer and epoch are right) and fails train_script_resumes_mid_epoch with a message naming it.
The script that ignores --snapshot-every is also this check's laziest answer: it earns nothing here.
Unit tests of the schedules the diagnosis compares with run no process.
"""
from __future__ import annotations

import pytest

from grader.exercises.torchrun import problem, reference, resumes, runs
from tests.helpers import failed, grade_source, mutate, solution_source

ID = "04_torchrun"
KILL_CHECKS = ["train_script_resumes_after_a_killed_worker", "train_script_resumes_mid_epoch"]

MISTAKES = {  # name -> (solution text, mutant text, phrase of the mid-epoch check's message)
    "resumes_at_the_epoch_start": (
        "skip = batches_run if epoch == epochs_run else 0", "skip = 0",
        "began epoch"),  # "... again at its first batch: ... trained twice"
    "offset_forgotten": (
        "for batch, (x, y) in enumerate(itertools.islice(loader, skip, None), start=skip):",
        "for batch, (x, y) in zip(range(skip, len(loader)), loader):",
        "the right number of batches"),
    "snapshots_only_at_epoch_ends": (  # the laziest answer to --snapshot-every: parse it, ignore it
        "save_snapshot(epoch, done)  # mid-epoch", "pass  # mid-epoch",
        "not only at epoch ends"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_mid_epoch_mistake_keeps_the_epoch_resume_and_fails_the_mid_epoch_check(name):
    old, new, phrase = MISTAKES[name]
    report = grade_source(ID, mutate(solution_source(ID), old, new), checks=KILL_CHECKS)
    messages = failed(report)
    assert set(messages) == {"train_script_resumes_mid_epoch"}, "\n".join(report.lines())
    assert phrase in messages["train_script_resumes_mid_epoch"], messages
    paid = {c.name: c.points for c in report.checks}
    assert paid == {"train_script_resumes_after_a_killed_worker": 3, "train_script_resumes_mid_epoch": 0}, paid


def test_every_kill_step_tells_the_mistakes_apart():
    """At every step the grader may draw, an epoch-end-only snapshot is too old, and the faulty resumes
    train other models than the uninterrupted run (and than each other)."""
    epochs, every = 3, runs.SNAPSHOT_EVERY
    steps = runs.kill_steps(epochs, every)
    assert steps and all(problem.STEPS_PER_EPOCH <= k < epochs * problem.STEPS_PER_EPOCH for k in steps)
    right = reference.reference_state(epochs, 11)
    for k in steps:
        assert k % problem.STEPS_PER_EPOCH >= every, k  # the epoch end is at least `every` steps back
        p = k // every * every  # the solution's snapshot at k
        assert 0 < p % problem.STEPS_PER_EPOCH and k - every < p <= k
        models = [reference.reference_state(epochs, 11, schedule=s)
                  for s in (resumes.from_epoch_start(epochs, p), resumes.offset_forgotten(epochs, p))]
        for model in models:
            assert any(not model[key].allclose(right[key]) for key in right), k
        assert any(not models[0][key].allclose(models[1][key]) for key in right), k


def test_progress_reads_only_a_well_formed_snapshot():
    assert resumes.progress({"epochs_run": 2, "batches_run": 3}) == 2 * problem.STEPS_PER_EPOCH + 3
    for bad in ({"epochs_run": 2}, {"epochs_run": 2, "batches_run": problem.STEPS_PER_EPOCH},
                {"epochs_run": 2, "batches_run": True}, {"epochs_run": 2.0, "batches_run": 0}, "text", None):
        assert resumes.progress(bad) is None, bad
