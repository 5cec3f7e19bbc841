"""Exercise 04_torchrun, train_script with --snapshot-every: a resume mid-epoch starts at the next batch.

One crash run per script, real torchrun (the workers stop at every step while the grader reads the snapshot; at
script_runs.KILL_STEP it kills one, torchrun restarts both). Each mid-epoch mistake keeps the epoch-level resume check's
points (model, optimizer and epoch are right) and fails train_script_resumes_mid_epoch with a message naming it.
The script that ignores --snapshot-every is also this check's laziest answer: it earns nothing here.
Unit tests of the schedules the diagnosis compares with run no process.
"""

from __future__ import annotations

import pytest

from grader.exercises.torchrun import problem, reference, resumes, script_runs
from tests.helpers import failed, grade_source, graded_once, mutate, solution_source

ID = "04_torchrun"
KILL_CHECKS = ["train_script_resumes_after_a_killed_worker", "train_script_resumes_mid_epoch"]

MISTAKES = {  # name -> (solution text, mutant text, phrase of the mid-epoch check's message)
    "resumes_at_the_epoch_start": (
        "skip = batches_run if epoch == epochs_run else 0",
        "skip = 0",
        "began epoch",
    ),  # "... again at its first batch: ... trained twice"
    "offset_forgotten": (
        "for batch, (x, y) in enumerate(itertools.islice(loader, skip, None), start=skip):",
        "for batch, (x, y) in zip(range(skip, len(loader)), loader):",
        "the right number of batches",
    ),
    "snapshots_only_at_epoch_ends": (  # the laziest answer to --snapshot-every: parse it, ignore it
        "save_snapshot(epoch, done)  # mid-epoch",
        "pass  # mid-epoch",
        "not only at epoch ends",
    ),
    "skips_batches_run_in_every_later_epoch": (
        "skip = batches_run if epoch == epochs_run else 0",
        "skip = batches_run",
        "every later epoch too",
    ),
    "batch_offset_off_by_one": (
        'epochs_run, batches_run = snapshot["epochs_run"], snapshot["batches_run"]',
        'epochs_run, batches_run = snapshot["epochs_run"], snapshot["batches_run"] + 1',
        "at batch 3, not at batch 2",
    ),
    "snapshots_every_n_plus_1_steps": (
        "(epoch * len(loader) + done) % args.snapshot_every == 0",
        "(epoch * len(loader) + done) % (args.snapshot_every + 1) == 0",
        "no more than 1 step(s) may go unsaved",
    ),
}


def graded_mistake(name: str):
    """The crash run's report on the solution with MISTAKES[name] put in, shared by the tests that grade it."""
    return graded_once(ID, mutate(solution_source(ID), *MISTAKES[name][:2]), tuple(KILL_CHECKS))


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_mid_epoch_mistake_keeps_the_epoch_resume_and_fails_the_mid_epoch_check(name):
    old, new, phrase = MISTAKES[name]
    report = graded_mistake(name)
    messages = failed(report)
    assert set(messages) == {"train_script_resumes_mid_epoch"}, "\n".join(report.lines())
    assert phrase in messages["train_script_resumes_mid_epoch"], messages
    paid = {c.name: c.points for c in report.checks}
    assert paid == {"train_script_resumes_after_a_killed_worker": 3, "train_script_resumes_mid_epoch": 0}, paid


# Reads the kill step where the grader once put it (TORCHRUN_EXERCISE_PAUSE_STEP, "<step>:<folder>") and snapshots
# only at epoch ends and exactly there: no better than its honest twin, snapshots_only_at_epoch_ends.
PEEKING = (
    "if done < len(loader) and (epoch * len(loader) + done) % args.snapshot_every == 0:",
    "if done < len(loader) and str(epoch * len(loader) + done) == "
    "os.environ.get('TORCHRUN_EXERCISE_PAUSE_STEP', ':').split(':')[0]:",
)


def test_a_script_reading_its_environment_for_the_kill_step_gains_nothing():
    report = grade_source(ID, mutate(solution_source(ID), *PEEKING), checks=KILL_CHECKS)
    twin = graded_mistake("snapshots_only_at_epoch_ends")  # graded above: one crash run per script
    assert report.score <= twin.score == 3, "\n".join(report.lines() + twin.lines())
    assert "not only at epoch ends" in failed(report)["train_script_resumes_mid_epoch"]


def test_the_same_file_gets_the_same_score_every_time():
    """The kill is a constant, nothing drawn: a wrong resume (batches skipped in every later epoch, which scored 4
    to 9 of 9 when the kill step was drawn at random) gets the same score and message in repeated gradings."""
    assert script_runs.KILL_STEP == 7 and not hasattr(script_runs, "kill_steps")
    source = mutate(solution_source(ID), *MISTAKES["skips_batches_run_in_every_later_epoch"][:2])
    # two gradings of one file: the mistake's test above made the first (graded_once), one more here (a third
    # cost a crash run; the kill step itself is asserted a constant above)
    reports = [graded_mistake("skips_batches_run_in_every_later_epoch"), grade_source(ID, source, checks=KILL_CHECKS)]
    assert len({(r.score, tuple(sorted(failed(r).items()))) for r in reports}) == 1, [r.lines() for r in reports]


def test_the_kill_step_the_mistakes_apart():
    """At the grader's one kill step (epoch 1, a later epoch follows), an epoch-end-only snapshot is too old, and
    the faulty resumes train other models than the uninterrupted run (and than each other)."""
    epochs, every, k = 3, script_runs.SNAPSHOT_EVERY, script_runs.KILL_STEP
    assert k // problem.STEPS_PER_EPOCH == 1 < epochs - 1  # epoch 1, a later epoch follows
    assert k % problem.STEPS_PER_EPOCH >= every  # the epoch end is at least `every` steps back
    p = k // every * every  # the solution's snapshot at k
    assert 0 < p % problem.STEPS_PER_EPOCH and k - every < p <= k
    right = reference.reference_state(epochs, 11)
    models = [reference.reference_state(epochs, 11, schedule=s) for s in resumes.faulty(epochs, k).values()]
    for model in models:
        assert any(not model[key].allclose(right[key]) for key in right)
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            assert any(not a[key].allclose(b[key]) for key in right)


def test_progress_reads_only_a_well_formed_snapshot():
    assert resumes.progress({"epochs_run": 2, "batches_run": 3}) == 2 * problem.STEPS_PER_EPOCH + 3
    for bad in (
        {"epochs_run": 2},
        {"epochs_run": 2, "batches_run": problem.STEPS_PER_EPOCH},
        {"epochs_run": 2, "batches_run": True},
        {"epochs_run": 2.0, "batches_run": 0},
        "text",
        None,
    ):
        assert resumes.progress(bad) is None, bad


def test_a_snapshot_after_every_step_is_a_correct_alternative():
    """More often than --snapshot-every asks (no step ever unsaved): full marks, nothing trained again."""
    source = mutate(solution_source(ID), "(epoch * len(loader) + done) % args.snapshot_every == 0", "True")
    report = grade_source(ID, source, checks=KILL_CHECKS)
    assert failed(report) == {} and report.score == 5, "\n".join(report.lines())
