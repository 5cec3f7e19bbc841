"""The rule of the checks where a rank must wait for its peers (a file rank 0 writes, a teardown): it waits in a
fence, a collective that holds its host until every rank has joined it, on every backend.

On gloo every collective blocks the host; on nccl only `dist.barrier()` does (and the `*_object` collectives for
the ranks that read what they receive): an all_reduce or broadcast returns once queued on the GPU, before the
peers have called it, and `monitored_barrier` runs on gloo only. An answer that waits in an all_reduce would
pass on CPU and fail, or pass by luck, on GPUs, so the checks judge it on gloo as nccl would: a rank whose only
collectives after its peer's event are no fence has not waited (happens_before.Collectives records them).
"""

from __future__ import annotations

from grader.checks import CheckFailed
from grader.exercises.collectives import KINDS
from grader.exercises.happens_before import COLLECTIVES
from grader.i18n import _

# What a rank may name (its result is the student's process's word): a torch.distributed function or a kind.
KNOWN = set(COLLECTIVES) | set(KINDS.values()) | {"barrier(async_op=True)"}


def unfenced(entries, after: int) -> list[str] | None:
    """The collectives a rank called after the first `after` ones (those its peer had entered at the event it
    must wait for), when there are some and none is a fence; else None. `entries`: Collectives.entries."""
    later = list(entries)[after:]
    if not later or any(fence is True for _name, fence in later):
        return None
    return list(dict.fromkeys(str(name) for name, _fence in later))


def named(names: list[str]) -> str:
    return ", ".join(f"dist.{name}" if name in KNOWN else "dist.<collective>" for name in names)


def rule(names: list[str]) -> str:
    """Why these collectives are no fence, in the student's terms."""
    if "monitored_barrier" in names:
        return _("it runs on gloo only, NCCL refuses it")
    return _(
        "that works on gloo, but on NCCL (GPUs) {names} returns once it is queued on the GPU, before the "
        "other ranks have called it; only dist.barrier() holds every rank until all have reached it, on every "
        "backend",
        names=named(names),
    )


def require_fenced(entries_by_rank, after: int, message: str) -> None:
    """Fail the check at the first rank whose only collectives after its peer's event (the first `after` ones) are
    no fence. `entries_by_rank`: (rank, Collectives.entries) pairs; `message`: an N_()-marked sentence with
    {rank}, {collectives} and {rule}, in the task's own words."""
    for rank, entries in entries_by_rank:
        waited_in = unfenced(entries, after)
        if waited_in:
            raise CheckFailed(_(message, rank=rank, collectives=named(waited_in), rule=rule(waited_in)))
