"""Check of 04_torchrun, train_script: a snapshot every --snapshot-every steps resumes at the same batch.

It reads the crash run of train_script_resumes_after_a_killed_worker (one run for both): the workers
stopped at every training forward while the grader read the snapshot, and at script_runs.KILL_STEP the grader
killed a worker instead; it counted every sample each worker's training forwards took over both
attempts. A right resume never leaves --snapshot-every steps unsaved (at any step of either attempt),
trains again only the steps after the snapshot, and ends with the uninterrupted run's model.
"""

from __future__ import annotations

from grader.checks import CheckFailed
from grader.exercises.torchrun import problem, reference, resumes, script_runs
from grader.exercises.torchrun.checks_script import KILL_EPOCHS, _check_state, _same, resumed_run
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.resumes import where

PER_RANK_BATCH = problem.GLOBAL_BATCH // script_runs.WORKERS


def _progress_at(snapshot, step: int) -> int:
    """How far the snapshot read at `step` got (0: none yet); CheckFailed when it does not say."""
    if snapshot is None:
        return 0  # nothing saved yet: a restart would begin at step 0
    if isinstance(snapshot, str):
        raise CheckFailed(f"at step {step} ({where(step)}) the snapshot {snapshot}")
    p = resumes.progress(snapshot)
    if p is None:
        keys = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
        raise CheckFailed(
            f"the snapshot holds {keys}: besides 'epochs_run' it needs 'batches_run', the batches "
            f"of epoch epochs_run already trained (0 to {resumes.STEPS - 1}), so that a restart "
            "knows where in the epoch to resume"
        )
    return p


def _check_age(step: int, p: int, every: int, saves_mid_epoch: bool) -> None:
    """At `step` (steps done), the newest snapshot, at progress p, is at most every - 1 steps old.
    saves_mid_epoch: the script took some mid-epoch snapshot in this run."""
    if 0 <= step - p < every:
        return
    if p > step:
        raise CheckFailed(
            f"at step {step} ({where(step)}) the snapshot said step {p} ({where(p)}): ahead of the "
            "training. epochs_run is the current epoch and batches_run its batches already trained"
        )
    newest = (
        "there was no snapshot yet"
        if p == 0
        else f"the newest snapshot was the one of step {p} ({where(p)}), {step - p} steps before"
    )
    if not saves_mid_epoch:
        raise CheckFailed(
            f"when training reached step {step} ({where(step)}) {newest}, and no snapshot of the run "
            f"was taken inside an epoch: with --snapshot-every {every} rank 0 also saves after every "
            f"{every} optimizer steps, not only at epoch ends (epochs_run = the current epoch, "
            "batches_run = its batches done)"
        )
    raise CheckFailed(
        f"when training reached step {step} ({where(step)}) {newest}: with --snapshot-every {every} "
        f"no more than {every - 1} step(s) may go unsaved. Save whenever the steps done over the whole "
        f"run (epoch * {resumes.STEPS} + batches done) are a multiple of {every}"
    )


def _mid_epoch(run: script_runs.ScriptRun) -> bool:
    return any(
        resumes.progress(snapshot) not in (None, 0) and resumes.progress(snapshot) % resumes.STEPS
        for _, _, snapshot in run.snapshots
    )


def _snapshot_progress(run: script_runs.ScriptRun, every: int) -> int:
    """Check the age of every snapshot of the first attempt, up to the kill; the progress at the kill."""
    p, mid_epoch = 0, _mid_epoch(run)
    for attempt, forward, snapshot in run.snapshots:
        if attempt == 0:
            p = _progress_at(snapshot, forward)
            _check_age(forward, p, every, mid_epoch)
    return p


def _check_restarted_ages(run: script_runs.ScriptRun, p: int, every: int) -> None:
    """After the restart (which resumed at p, checked by the counts), every snapshot is as recent."""
    for attempt, forward, snapshot in run.snapshots:
        if attempt == 1:
            step = p + forward
            _check_age(step, _progress_at(snapshot, step), every, True)


def _check_counts(run: script_runs.ScriptRun, p: int) -> None:
    """Each worker trained every batch once, plus the steps between the snapshot and the kill again."""
    kill, per_step = run.kill_step, PER_RANK_BATCH
    expected = (KILL_EPOCHS * resumes.STEPS + kill - p) * per_step
    seen = {rank: (run.seen or {}).get(str(rank), 0) for rank in range(script_runs.WORKERS)}
    if all(n == expected for n in seen.values()):
        return
    counts = ", ".join(f"rank {rank}: {n}" for rank, n in seen.items())
    extra = seen[0] - expected
    epoch, batch = divmod(p, resumes.STEPS)
    later = KILL_EPOCHS - 1 - epoch
    if extra == batch * per_step and batch:
        raise CheckFailed(
            f"the restarted run began epoch {epoch} again at its first batch: the snapshot was taken "
            f"after {batch} of its batches, and those were trained twice (samples per worker: "
            f"{counts}; expected {expected}). Skip the snapshot's batches_run batches of that "
            "epoch, e.g. itertools.islice(loader, batches_run, None)"
        )
    if batch and later and extra == -later * batch * per_step:
        raise CheckFailed(
            f"the restarted run skipped the first {batch} batches of every later epoch too (samples "
            f"per worker: {counts}; expected {expected}): skip batches_run batches only in the epoch "
            "you resume (epoch == epochs_run); every later epoch starts at its first batch"
        )
    if extra and extra % per_step == 0 and 0 < batch - extra // per_step < resumes.STEPS:
        started = batch - extra // per_step
        raise CheckFailed(
            f"the restarted run began epoch {epoch} at batch {started}, not at batch {batch} (the "
            f"snapshot's batches_run): {abs(extra) // per_step} batch(es) "
            f"{'trained twice' if extra > 0 else 'never trained'} (samples per worker: {counts}; "
            f"expected {expected}). Skip exactly batches_run batches: itertools.islice(loader, "
            "batches_run, None)"
        )
    raise CheckFailed(
        f"stopped at step {kill} with a snapshot at step {p} ({where(p)}), the workers' training "
        f"forwards took {counts} samples over both attempts, expected {expected} each (every batch "
        f"once, and the {kill - p} step(s) after the snapshot again): resume at batch batches_run of "
        "epoch epochs_run, with sampler.set_epoch(epochs_run)"
    )


@EXERCISE.check("train_script", points=2)
def train_script_resumes_mid_epoch(g):
    """The crash run (--snapshot-every 2): at every step of both attempts the snapshot is at most 1 step old
    and says where in its epoch it was taken (batches_run); the restart trains each remaining batch once
    (samples counted per worker) and ends with the uninterrupted run's model."""
    try:
        run = resumed_run(g)
    except CheckFailed as exc:
        raise CheckFailed(
            f"resuming mid-epoch counts only when the resume after a kill works; it does not: {exc}"
        ) from None
    p = _snapshot_progress(run, script_runs.SNAPSHOT_EVERY)
    _check_counts(run, p)
    _check_restarted_ages(run, p, script_runs.SNAPSHOT_EVERY)
    if (
        p % resumes.STEPS
        and isinstance(run.final, dict)
        and _same(
            g,
            run.final,
            reference.reference_state(KILL_EPOCHS, run.seed, schedule=resumes.offset_forgotten(KILL_EPOCHS, p)),
        )
    ):
        batch = p % resumes.STEPS
        raise CheckFailed(
            f"the restarted run took the right number of batches in epoch {p // resumes.STEPS} but "
            f"the wrong ones: its first {resumes.STEPS - batch} in the epoch's order instead of the "
            f"{resumes.STEPS - batch} after the snapshot's {batch}. Keep the sampler's order "
            "(set_epoch) and skip its first batches_run batches"
        )
    _check_state(
        g,
        run.final,
        KILL_EPOCHS,
        run.seed,
        "resumed mid-epoch: the final model",
        "resume at the snapshot's epochs_run and batches_run, with the optimizer state restored",
    )
