"""Hidden checks of checks_script.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.checks import CheckFailed
from grader.exercises.torchrun import script_runs
from grader.exercises.torchrun.output_evidence import evidence
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.hidden_reference import node_command
from grader.exercises.torchrun.checks_script import (
    EPOCHS,
    _scenario,
    _check_final,
    _log_state,
    _check_log,
    require_training,
)  # noqa: F401,E501


@EXERCISE.check("train_script", points=1, hidden=True)
def train_script_on_two_nodes(g):
    """Two torchrun agents (--nnodes=2, one worker each, c10d on 127.0.0.1), each "node" in its own
    directory: the result equals the single-process reference, and only global rank 0 writes
    (checked once the result is right: writing well what was not trained earns nothing)."""
    run = _scenario(g, script_runs.two_nodes, EPOCHS, node_command)
    what = "2 nodes of 1 worker, 3 epochs"
    _check_final(
        g,
        run,
        EPOCHS,
        what,
        "the result must not depend on how the workers are spread over nodes: "
        "use the global rank and world size (RANK, WORLD_SIZE) for the sampler and the batch size",
    )
    if run.other_files:
        raise CheckFailed(
            f"on 2 nodes, the worker of node 1 (RANK 1, LOCAL_RANK 0) wrote {run.other_files}: "
            "only global rank 0 may write the snapshot, the log and the final model; test "
            "RANK (or dist.get_rank()), not LOCAL_RANK"
        )
    _check_log(run, list(range(EPOCHS)), what)


@EXERCISE.check("train_script", points=1, hidden=True)
def train_script_replaces_the_snapshot_atomically(g):
    """After the first snapshot the grader hard-links it and lets the run go on: a snapshot written
    to a temporary file and os.replace()d leaves the link's content alone (a crash mid-write
    never leaves a half-written snapshot); one rewritten in place changes it. Credited only when
    the run trained right: writing well what was not trained earns nothing."""
    run = _scenario(g, script_runs.linked, EPOCHS, 1)
    require_training(g, run, EPOCHS, "the atomic snapshot")
    if not run.acted:
        state = "but there was no snapshot" if run.log_when_acted else _log_state(run.log)
        raise CheckFailed(
            "the grader waits for the epoch log to list 1 epoch, then looks at the snapshot; "
            f"{state}\n" + evidence(run.output, run.timed_out)
        )
    link, then = run.link, run.snapshot_as_acted
    if isinstance(link, dict) and isinstance(then, dict) and _progress(link) == _progress(then):
        return
    found = _progress(link) if isinstance(link, dict) else link
    raise CheckFailed(
        "the snapshot file is rewritten in place: the grader hard-linked the snapshot file when the "
        f"log listed its first epoch (it then held {_progress(then)}), and at the end that file held "
        f"{found}. A worker killed during torch.save leaves a half-written snapshot that the restarted "
        "run cannot read: save to a temporary file in the same directory, then os.replace(tmp, "
        "snapshot)"
    )


def _progress(snapshot) -> str:
    if not isinstance(snapshot, dict):
        return repr(snapshot)[:100]
    return f"epochs_run={snapshot.get('epochs_run')!r}, batches_run={snapshot.get('batches_run')!r}"
