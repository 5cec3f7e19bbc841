"""Check of 04_torchrun, train_script: a snapshot every --snapshot-every steps resumes at the same batch.

It reads the crash run of train_script_resumes_after_a_killed_worker (one run for both): the grader
stopped the workers at a step it drew, read the snapshot there, killed a worker, and counted every
sample each worker's training forwards took over both attempts. A right resume leaves no more than
--snapshot-every steps unsaved, trains again only the steps after the snapshot, and ends with the
uninterrupted run's model.
"""
from __future__ import annotations

from grader.checks import CheckFailed
from grader.exercises.torchrun import problem, reference, resumes, runs
from grader.exercises.torchrun.checks_script import KILL_EPOCHS, _check_state, _same, resumed_run
from grader.exercises.torchrun.exercise import EXERCISE
from grader.exercises.torchrun.resumes import where

PER_RANK_BATCH = problem.GLOBAL_BATCH // runs.WORKERS


def _snapshot_progress(run: runs.ScriptRun, every: int) -> int:
    """Steps before the snapshot the grader read at the kill; CheckFailed unless it is recent enough."""
    kill, snapshot = run.kill_step, run.snapshot_at_kill
    p = resumes.progress(snapshot)
    if p is None:
        keys = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
        raise CheckFailed(f"the snapshot holds {keys}: besides 'epochs_run' it needs 'batches_run', the batches "
                          f"of epoch epochs_run already trained (0 to {resumes.STEPS - 1}), so that a restart "
                          "knows where in the epoch to resume")
    if not 0 <= kill - p < every:
        if p % resumes.STEPS == 0 and p <= kill:
            raise CheckFailed(f"the workers were stopped at step {kill} ({where(kill)}) and the last snapshot was "
                              f"the one at the end of epoch {p // resumes.STEPS - 1}, {kill - p} steps before: with "
                              f"--snapshot-every {every} rank 0 also saves after every {every}th step, not only at "
                              "epoch ends (epochs_run = the current epoch, batches_run = its batches done)")
        raise CheckFailed(f"the workers were stopped at step {kill} ({where(kill)}); the snapshot then said "
                          f"epochs_run={snapshot['epochs_run']}, batches_run={snapshot['batches_run']} (step {p}): "
                          f"with --snapshot-every {every} it should be at most {every - 1} steps old, never ahead")
    return p


def _check_counts(run: runs.ScriptRun, p: int) -> None:
    """Each worker trained every batch once, plus the steps between the snapshot and the kill again."""
    kill, per_step = run.kill_step, PER_RANK_BATCH
    expected = (KILL_EPOCHS * resumes.STEPS + kill - p) * per_step
    seen = {rank: (run.seen or {}).get(str(rank), 0) for rank in range(runs.WORKERS)}
    if all(n == expected for n in seen.values()):
        return
    counts = ", ".join(f"rank {rank}: {n}" for rank, n in seen.items())
    extra = seen[0] - expected
    epoch, batch = divmod(p, resumes.STEPS)
    if extra == batch * per_step and batch:
        raise CheckFailed(f"the restarted run began epoch {epoch} again at its first batch: the snapshot was taken "
                          f"after {batch} of its batches, and those were trained twice (samples per worker: "
                          f"{counts}; expected {expected}). Skip the snapshot's batches_run batches of that "
                          "epoch, e.g. itertools.islice(loader, batches_run, None)")
    raise CheckFailed(f"stopped at step {kill} with a snapshot at step {p} ({where(p)}), the workers' training "
                      f"forwards took {counts} samples over both attempts, expected {expected} each (every batch "
                      f"once, and the {kill - p} step(s) after the snapshot again): resume at batch batches_run of "
                      "epoch epochs_run, with sampler.set_epoch(epochs_run)")


@EXERCISE.check("train_script", points=2)
def train_script_resumes_mid_epoch(g):
    """The crash run (--snapshot-every 2): at the step where the grader stopped the workers, the snapshot is
    at most 1 step old and says where in its epoch it was taken (batches_run); the restart trains each
    remaining batch once (samples counted per worker) and ends with the uninterrupted run's model."""
    try:
        run = resumed_run(g)
    except CheckFailed as exc:
        raise CheckFailed(f"resuming mid-epoch counts only when the resume after a kill works; it does not: {exc}"
                          ) from None
    p = _snapshot_progress(run, runs.SNAPSHOT_EVERY)
    _check_counts(run, p)
    if p % resumes.STEPS and isinstance(run.final, dict) and _same(g, run.final, reference.reference_state(
            KILL_EPOCHS, run.seed, schedule=resumes.offset_forgotten(KILL_EPOCHS, p))):
        batch = p % resumes.STEPS
        raise CheckFailed(f"the restarted run took the right number of batches in epoch {p // resumes.STEPS} but "
                          f"the wrong ones: its first {resumes.STEPS - batch} in the epoch's order instead of the "
                          f"{resumes.STEPS - batch} after the snapshot's {batch}. Keep the sampler's order "
                          "(set_epoch) and skip its first batches_run batches")
    _check_state(g, run.final, KILL_EPOCHS, run.seed, "resumed mid-epoch: the final model",
                 "resume at the snapshot's epochs_run and batches_run, with the optimizer state restored")
