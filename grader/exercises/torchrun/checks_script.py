"""Checks of 04_torchrun, train_script: launched with real torchrun (2 workers, a killed worker with
--max-restarts=1, two "nodes", a snapshot probe).

Each run is isolated (script_runs.py, grader_free_python.py): the script's Python cannot import the grader, and
problem.SEED (initial weights, data, sampler) is drawn for the run, so the expected models, computed
here in the parent, are reached only by training. The checks about how the script writes (one
writer, atomic replace) first verify that training: a script that writes well what it never
trained earns nothing.
"""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.exercises.torchrun import problem, reference, resumes, script_runs
from grader.exercises.torchrun.resumes import where
from grader.exercises.torchrun.output_evidence import evidence, read_half_written
from grader.exercises.torchrun.saves import check_saves
from grader import tolerances
from grader.shared_runs import parent_job

from grader.exercises.torchrun import EXERCISE


# ---------------------------------------------------------------- train_script

EPOCHS = 3  # the plain, two-node and snapshot-probe runs
KILL_EPOCHS = 3  # the crash run: a worker is killed at script_runs.KILL_STEP, in epoch 1


def _get_script(ctx, student):
    """In a rank: the student's train_script (a value, not a function)."""
    return student.task("train_script")


def _script(g) -> str:
    source = g.run(_get_script, world_size=1, init_group=False)[0]
    if not isinstance(source, str):
        raise CheckFailed(
            f"train_script is a {type(source).__name__}; it must be the source text of the script (a str)"
        )
    try:
        compile(source, "train.py", "exec")  # compiling runs nothing
    except SyntaxError as exc:
        raise CheckFailed(f"train_script has a syntax error at line {exc.lineno}: {exc.msg}") from None
    return source


def _scenario(g, scenario, *args) -> script_runs.ScriptRun:
    """Run a scenario on the student's script, once per submission: the plain check, the snapshot probe and the
    checkpoint checks share one run (the probe's pause and hard link change nothing else), the two resume checks
    the crash run. A run that reached its bound is not shared: each check then makes its own."""
    source = _script(g)
    run = parent_job(
        g,
        ("torchrun", scenario.__name__, source, args),
        lambda: script_runs.with_retry(scenario, source, *args),
        keep=lambda done: not done.timed_out,
    )
    if run.retried:
        g.notes.append(f"{run.retried}; the run was repeated (not counted)")
    check_saves(run.saves)  # a run the grader stopped at a save: that save's mistake, for every check
    return run


def _check_final(g, run: script_runs.ScriptRun, epochs: int, what: str, likely: str) -> None:
    final = run.final
    if final is None:
        raise CheckFailed(
            f"{what}: no final model at --out final.pt (rank 0 writes model.state_dict() there "
            "after the last epoch)\n" + evidence(run.output, run.timed_out)
        )
    if isinstance(final, str):
        raise CheckFailed(f"{what}: final.pt {final}; save the unwrapped model's state_dict with torch.save")
    _check_state(g, final, epochs, run.seed, f"{what}: the final model", likely)


def _backend(g) -> str:
    """The backend of the torchrun workers' hardware (script_runs.WORKERS ranks), not of the 1-rank run that read
    the script."""
    return g.plan(script_runs.WORKERS).backend


def _same(g, state: dict, expected: dict) -> bool:
    """`state` equals `expected` within the float tolerance (same keys, shapes, values)."""
    if set(state) != set(expected):
        return False
    for key, want in expected.items():
        got = state[key]
        if not isinstance(got, torch.Tensor) or not tolerances.allclose(got, want, _backend(g)):
            return False
    return True


def _diagnosis(g, state: dict, epochs: int, seed: int) -> str:
    """The likely mistake when `state` is not the run's reference: never trained, a fixed seed."""
    if _same(g, state, reference.initial_state(seed)):
        return (
            "it is the untrained model: the script saved the model without training it (each epoch: "
            "zero_grad, loss_fn(ddp_model(x), y), backward, step per batch)"
        )
    if _same(g, state, reference.reference_state(epochs, seed, sampler_seed=0)):
        return (
            "the batches were shuffled with seed 0, not problem.SEED: the grader draws problem.SEED for each "
            "run, so pass DistributedSampler(dataset, shuffle=True, seed=problem.SEED), never a number"
        )
    if seed != 0 and _same(g, state, reference.reference_state(epochs, 0)):
        return (
            f"it is the model of a run with seed 0, not of this run (problem.SEED={seed}, drawn by the grader "
            "for each run): train problem.make_model() on problem.make_dataset() in the workers; a result "
            "computed or stored in advance cannot match"
        )
    return ""


def _check_state(g, state, epochs: int, seed: int, what: str, likely: str) -> None:
    expected = reference.reference_state(epochs, seed)
    if not isinstance(state, dict):
        raise CheckFailed(f"{what} is a {type(state).__name__}, not a state_dict")
    if set(state) != set(expected):
        wrapped = all(k.startswith("module.") for k in state)
        raise CheckFailed(
            f"{what} has the keys {sorted(state)[:4]}, expected {sorted(expected)}"
            + (
                "; it is the DDP wrapper's state_dict: save ddp_model.module.state_dict() (or the "
                "model before wrapping)"
                if wrapped
                else ""
            )
        )
    if _same(g, state, expected):
        return
    diagnosis = _diagnosis(g, state, epochs, seed)
    if diagnosis:
        raise CheckFailed(f"{what} differs from one process trained on the same batches: {diagnosis}")
    for key in expected:
        tolerances.assert_close(state[key], expected[key], f"{what}, `{key}`", likely, backend=_backend(g))


def _check_shards(run: script_runs.ScriptRun, epochs: int, what: str) -> None:
    """Every worker trained on its own shard: SAMPLES / script_runs.WORKERS samples per epoch in its training forwards.
    A script where rank 0 trains on whole global batches alone reaches the same weights without DDP."""
    expected = problem.SAMPLES // script_runs.WORKERS * epochs
    seen = {rank: (run.seen or {}).get(str(rank), 0) for rank in range(script_runs.WORKERS)}
    if all(n == expected for n in seen.values()):
        return
    counts = ", ".join(f"rank {rank}: {n}" for rank, n in seen.items())
    if 0 in seen.values():
        raise CheckFailed(
            f"{what}: the workers' training forwards took {counts} samples, yet the final model is "
            "right: every worker must train on its own shard of each epoch (DistributedSampler) and "
            "DDP average the gradients; one rank training alone on whole global batches is not "
            "distributed training"
        )
    raise CheckFailed(
        f"{what}: the workers' training forwards took {counts} samples in {epochs} epochs, expected "
        f"{expected} each ({problem.SAMPLES} samples split over {script_runs.WORKERS} workers): each worker "
        "takes only its shard (DistributedSampler) in batches of GLOBAL_BATCH // world_size, through "
        "ddp_model(x) (problem.make_model()'s forward)"
    )


def require_training(g, run: script_runs.ScriptRun, epochs: int, what: str) -> None:
    """For a check about how the script writes its files: fail unless what it wrote was trained right."""
    try:
        _check_final(g, run, epochs, f"{epochs} epochs", "see train_script_matches_single_process")
    except CheckFailed as exc:
        raise CheckFailed(f"{what} counts only when the training is right, and it is not: {exc}") from None


def _log_state(log: list[int] | None) -> str:
    return "no epoch log was written" if log is None else f"the log listed only {log}"


def _logged_mid_epoch(run: script_runs.ScriptRun) -> bool:
    """When the log got its first line, the snapshot was a mid-epoch one: the line came with it."""
    then = run.snapshot_as_acted
    return isinstance(then, dict) and (then.get("batches_run") not in (0, None) or then.get("epochs_run") == 0)


def _check_log(run: script_runs.ScriptRun, expected: list[int], what: str) -> None:
    log = run.log
    if log is None:
        raise CheckFailed(
            f"{what}: no epoch log at --epoch-log epochs.log (rank 0 appends the epoch number "
            "after each end-of-epoch snapshot)\n" + evidence(run.output, run.timed_out)
        )
    if log == expected:
        return
    if sorted(set(log)) == expected and len(log) == 2 * len(expected):
        if _logged_mid_epoch(run):
            then = run.snapshot_as_acted
            raise CheckFailed(
                f"{what}: the epoch log lists every epoch twice ({log}), and its first line came with "
                f"a mid-epoch snapshot (epochs_run={then.get('epochs_run')!r}, batches_run="
                f"{then.get('batches_run')!r}): append the epoch's line only after the snapshot at the "
                "end of the epoch, none for the mid-epoch snapshots"
            )
        raise CheckFailed(
            f"{what}: the epoch log lists every epoch twice ({log}): only rank 0 may write the log (and the snapshot)"
        )
    raise CheckFailed(
        f"{what}: the epoch log lists {log}, expected {expected} (one line per epoch, the epoch "
        "number, written by rank 0 after the snapshot at the end of that epoch; none for mid-epoch "
        "snapshots)\n" + evidence(run.output, run.timed_out)
    )


def _check_snapshot(snapshot, epochs: int, what: str) -> None:
    if snapshot is None:
        raise CheckFailed(f"{what}: no snapshot at --snapshot snapshot.pt")
    if isinstance(snapshot, str):
        raise CheckFailed(f"{what}: the snapshot {snapshot}")
    if not isinstance(snapshot, dict) or not {"model", "optimizer", "epochs_run"} <= set(snapshot):
        keys = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
        raise CheckFailed(
            f"{what}: the snapshot holds {keys}; it must be a dict with 'model' (the model's "
            "state_dict), 'optimizer' (the optimizer's state_dict) and 'epochs_run'"
        )
    if snapshot["epochs_run"] != epochs:
        raise CheckFailed(
            f"{what}: the last snapshot says epochs_run={snapshot['epochs_run']!r} after "
            f"{epochs} epochs; store the number of epochs completed (epoch + 1)"
        )


@EXERCISE.check("train_script", points=2)
def train_script_matches_single_process(g):
    """torchrun --standalone --nproc-per-node=2 train.py --epochs 3 ...: the final model equals one
    process trained on the same global batches; the log lists 0, 1, 2; the last snapshot holds
    model, optimizer and epochs_run 3."""
    run = _scenario(g, script_runs.linked, EPOCHS, 1)
    what = "2 workers, 3 epochs"
    _check_final(
        g,
        run,
        EPOCHS,
        what,
        "each rank takes batches of GLOBAL_BATCH // world_size from a "
        "DistributedSampler(dataset, shuffle=True, seed=problem.SEED) with set_epoch(epoch) each epoch, "
        "and the model is wrapped in DDP",
    )
    _check_shards(run, EPOCHS, what)
    _check_log(run, list(range(EPOCHS)), what)
    _check_snapshot(run.snapshot, EPOCHS, what)
    _check_state(
        g,
        run.snapshot["model"],
        EPOCHS,
        run.seed,
        f"{what}: the snapshot's model",
        "the snapshot should hold the model as trained so far",
    )


def resumed_run(g) -> script_runs.ScriptRun:
    """The crash run, once the restart found the snapshot and trained the remaining epochs; else CheckFailed."""
    run = _scenario(g, script_runs.killed, KILL_EPOCHS, script_runs.SNAPSHOT_EVERY)
    what = "after a worker was killed"
    kill, epoch = run.kill_step, run.kill_step // problem.STEPS_PER_EPOCH
    if not run.acted:
        if run.log_when_acted is None:
            if run.final is not None:  # the run ended without reaching that step: a training mistake shows first
                _check_final(
                    g,
                    run,
                    KILL_EPOCHS,
                    f"a run that never reached step {kill}",
                    "see train_script_matches_single_process",
                )
            raise CheckFailed(
                f"the grader waits for the workers to reach step {kill} ({where(kill)}) to kill one; "
                f"they did not ({_log_state(run.log)})\n" + evidence(run.output, run.timed_out)
            )
        raise CheckFailed("the grader found no worker with LOCAL_RANK 1 to kill (please tell the instructor)")
    if run.log_when_acted != list(range(epoch)):
        _check_log(run, list(range(KILL_EPOCHS)), f"before the kill at step {kill} ({where(kill)})")
    if not run.snapshot_when_acted:
        raise CheckFailed(
            f"the workers reached step {kill} ({where(kill)}) with no snapshot at --snapshot "
            "snapshot.pt: rank 0 saves one after every epoch, before it appends to the log"
        )
    if run.final is None or isinstance(run.final, str) or run.log is None:
        if read_half_written(run.output):
            raise CheckFailed(
                f"{what}, the restarted workers could not read the snapshot (read half-written?): "
                "write it to a temporary file, then os.replace() it over the snapshot, so that a "
                "crash never leaves a partial file\n" + evidence(run.output, run.timed_out)
            )
        raise CheckFailed(
            f"{what}, torchrun restarted the workers but the run did not finish (final model: "
            f"{'missing' if run.final is None else run.final})\n" + evidence(run.output, run.timed_out)
        )
    after = run.log[len(run.log_when_acted) :]
    resumed = list(range(epoch, KILL_EPOCHS))
    if after[:1] == [0] and epoch > 0:
        raise CheckFailed(
            f"{what} in epoch {epoch}, the restarted run trained epochs {after}: it started again "
            f"from epoch 0. Load the snapshot when it exists and continue from its epochs_run"
        )
    if after != resumed:
        raise CheckFailed(
            f"{what} in epoch {epoch}, the restarted run trained epochs {after}, expected {resumed}: "
            "it should continue from the snapshot's epochs_run up to --epochs"
        )
    return run


@EXERCISE.check("train_script", points=3)
def train_script_resumes_after_a_killed_worker(g):
    """3 epochs, --max-restarts=1; the grader SIGKILLs worker LOCAL_RANK 1 at step 7 (epoch 1, batch 3).
    torchrun restarts both workers; they must resume in the epoch of the kill (the log then lists 0, 1, 2)
    and end with the model of an uninterrupted run. Where in that epoch they resume is
    train_script_resumes_mid_epoch's business: a resume at the right epoch passes here."""
    run = resumed_run(g)
    accepted = [None, *resumes.faulty(KILL_EPOCHS, run.kill_step).values()]  # None: the uninterrupted run
    if isinstance(run.final, dict) and any(
        _same(g, run.final, reference.reference_state(KILL_EPOCHS, run.seed, schedule=s)) for s in accepted
    ):
        return  # the right epoch, model and optimizer; the batch is judged by train_script_resumes_mid_epoch
    what = "after a worker was killed: the final model"
    if isinstance(run.final, dict):
        _diagnose_resume(g, run.final, run.seed, run.kill_step, what)
    _check_state(
        g,
        run.final,
        KILL_EPOCHS,
        run.seed,
        what,
        "the resumed run must continue exactly where the snapshot left off: restore the optimizer "
        "state (momentum) as well as the model, and call sampler.set_epoch(epoch) with the true epoch",
    )


def _diagnose_resume(g, final: dict, seed: int, kill_step: int, what: str) -> None:
    """The final model is a resume's from a snapshot before the kill with one thing lost: say which."""
    for p in resumes.snapshots_before(kill_step):
        if _same(g, final, reference.reference_state(KILL_EPOCHS, seed, fresh_optimizer_at=p)):
            raise CheckFailed(
                f"{what} is what training gives when the optimizer starts afresh at the restart (from "
                f"{where(p)}, its momentum lost); the model, epochs and batches were right. Keep "
                "optimizer.state_dict() in the snapshot and restore the optimizer state with "
                "optimizer.load_state_dict(...) when resuming"
            )
        renumbered = resumes.epochs_renumbered(KILL_EPOCHS, p)
        if _same(g, final, reference.reference_state(KILL_EPOCHS, seed, schedule=renumbered)):
            raise CheckFailed(
                f"{what} is what training gives when the epochs after the restart (from {where(p)}) are "
                "shuffled as epochs 0, 1, ... again: sampler.set_epoch got the count of epochs since the "
                "restart, not the epoch itself. Call sampler.set_epoch(epoch) with the true epoch"
            )
