"""Inside the ranks: order evidence for checks of "does rank A wait for rank B?".

A verdict must never rest on a sleep or a measured duration. Instead the ranks
leave marker files in the run's shared workdir, and a rank holds back (for a
bounded time) until the others have shown where they are:

    watch = Collectives(ctx)
    with watch.marking(student_fn):      # "I am in my k-th collective", while in it
        student_fn()
    mark(ctx, "returned")

`blocked_or_returned(ctx, ranks, watch.entered)` is then true once each of those
ranks has returned, or sits in a collective that this rank has not joined yet (its
k-th, with k greater than the number this rank has entered): such a rank cannot
leave before this rank joins. A rank that holds an action until then makes every
early return visible: the early rank has provably returned before the action.
Collectives of one group pair up in call order on every rank, which is what the
count relies on. They are counted at torch's dispatcher (collectives.py), so every
spelling counts; a rank is marked as it enters one, and unmarked when the
torch.distributed function it called returns (an async_op=True call returns at
once: the rank is not blocked). A marker left behind by a spelling without such a
function is harmless: once that collective completes, every rank has joined it.

Holding a rank proves an early return; whether the answer waited in a way that also holds on GPUs is the
`entries` record (fences.py judges it): under nccl only a barrier blocks the host until every rank has joined
it, the other collectives return once queued on the GPU, so gloo's blocking all_reduce is no evidence for nccl.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time

from grader.exercises.collectives import record_collectives
from grader.exercises.dist_patch import replaced

# The torch.distributed functions whose return says the rank left its collective.
COLLECTIVES = (
    "barrier",
    "monitored_barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
POINT_TO_POINT = ("send", "recv")  # they pair two ranks, not the group: not counted
# They read what they received back to the host, so on every backend they hold a rank that receives until
# every rank has joined them (the one exception, broadcast_object_list's source, is decided per call).
OBJECT_COLLECTIVES = ("all_gather_object", "gather_object", "scatter_object_list", "broadcast_object_list")
POLL_S = 0.002  # how often a held rank looks again (not a verdict: the wait ends on evidence)


def _path(ctx, name: str, rank: int | None = None) -> str:
    return os.path.join(ctx.workdir, f"hb.{name}.{ctx.rank if rank is None else rank}")


def mark(ctx, name: str, content: str = "") -> None:
    tmp = _path(ctx, name) + ".tmp"
    with open(tmp, "w") as f:
        f.write(content)
    os.replace(tmp, _path(ctx, name))  # readers see the whole marker or none


def unmark(ctx, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(_path(ctx, name))


def marked(ctx, name: str, rank: int) -> bool:
    return os.path.exists(_path(ctx, name, rank))


def _collective_of(ctx, rank: int) -> int:
    """Which collective (1, 2, ...) `rank` is inside now; 0 when none."""
    try:
        with open(_path(ctx, "in_collective", rank)) as f:
            return int(f.read() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def blocked_or_returned(ctx, ranks, entered_here: int) -> bool:
    return all(marked(ctx, "returned", r) or _collective_of(ctx, r) > entered_here for r in ranks)


def wait_until(condition, bound_s: float) -> bool:
    """Poll `condition` until it holds or `bound_s` passes (a safety bound, never the verdict)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


class Collectives:
    """Counts this rank's collectives and marks the one it is in."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.entered = 0  # collectives entered so far, as the dispatcher saw them
        # one per collective entered: (what the answer called, whether it holds the host on every backend)
        self.entries: list[tuple[str, bool]] = []
        self._depth = 0
        self._calling = None  # (name, fence) of the outermost torch.distributed function being called

    def _entering(self, call) -> None:
        if call.kind not in POINT_TO_POINT:
            self.entered += 1
            self.entries.append(self._calling or (call.kind, False))  # a spelling we did not wrap: no fence known
            mark(self.ctx, "in_collective", str(self.entered))

    def _unmarking(self, name, real):
        def call(*args, **kwargs):
            if self._depth == 0:
                self._calling = _fence(name, real, args, kwargs)
            self._depth += 1
            try:
                return real(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._calling = None
                    unmark(self.ctx, "in_collective")

        return call

    @contextlib.contextmanager
    def marking(self, student_fn=None):
        """Collectives called inside are counted and marked, in any spelling; student_fn's globals
        are searched for torch.distributed functions imported by name. Everything is restored on exit."""
        try:
            with replaced(COLLECTIVES, self._unmarking, student_fn), record_collectives(on_call=self._entering):
                yield self
        finally:
            unmark(self.ctx, "in_collective")


def _fence(name: str, real, args, kwargs) -> tuple[str, bool]:
    """(how the call reads, whether it holds this rank's host until every rank has joined it on every backend)."""
    import torch.distributed as dist

    try:
        bound = inspect.signature(real).bind(*args, **kwargs).arguments
        if name == "barrier":
            return ("barrier(async_op=True)", False) if bound.get("async_op") else (name, True)
        if name == "broadcast_object_list":  # its source sends and goes on; the others read what arrives
            if bound.get("group_src") is not None:
                return name, dist.get_rank(bound.get("group")) != bound["group_src"]
            return name, dist.get_rank() != (0 if bound.get("src") is None else bound["src"])
    except Exception:  # arguments torch itself will refuse: the call raises to the answer, as without us
        return name, False
    return name, name in OBJECT_COLLECTIVES
