"""Inside the ranks: order evidence for checks of "does rank A wait for rank B?".

A verdict must never rest on a sleep or a measured duration. Instead the ranks
leave marker files in the run's shared workdir, and a rank holds back (for a
bounded time) until the others have shown where they are:

    with in_collective_markers(ctx):           # this rank marks "blocked in a collective"
        student_fn()
    mark(ctx, "returned")

`blocked_or_returned(ctx, ranks)` is then true once each of those ranks is either
inside a collective right now (so it cannot leave it before this rank joins one)
or has returned. A rank that holds its action until then makes every early
return visible: the early rank has provably returned before the action.
"""
from __future__ import annotations

import contextlib
import os
import time

COLLECTIVES = ("barrier", "monitored_barrier", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
               "reduce_scatter", "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all",
               "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")
POLL_S = 0.002  # how often a held rank looks again (not a verdict: the wait ends on evidence)


def _path(ctx, name: str, rank: int | None = None) -> str:
    return os.path.join(ctx.workdir, f"hb.{name}.{ctx.rank if rank is None else rank}")


def mark(ctx, name: str) -> None:
    open(_path(ctx, name), "w").close()


def unmark(ctx, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(_path(ctx, name))


def marked(ctx, name: str, rank: int) -> bool:
    return os.path.exists(_path(ctx, name, rank))


def wait_until(condition, bound_s: float) -> bool:
    """Poll `condition` until it holds or `bound_s` passes (a safety bound, never the verdict)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


@contextlib.contextmanager
def in_collective_markers(ctx, student_fn=None):
    """While inside, each torch.distributed collective this rank calls leaves the marker
    "in_collective" for as long as the call lasts. `from torch.distributed import barrier`
    in the answers is covered too (student_fn's globals). Restored on exit."""
    import inspect

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    saved = []
    depth = [0]

    def wrap(real):
        def marked_call(*args, **kwargs):
            depth[0] += 1
            if depth[0] == 1:
                mark(ctx, "in_collective")
            try:
                return real(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    unmark(ctx, "in_collective")
        return marked_call

    reals = {}
    for module in (dist, c10d):
        for name in COLLECTIVES:
            real = getattr(module, name, None)
            if real is not None:
                reals[id(real)] = real
                saved.append((module, name, real))
                setattr(module, name, wrap(real))
    answers = getattr(inspect.unwrap(student_fn), "__globals__", None) if student_fn is not None else None
    for name, value in list((answers or {}).items()):
        if id(value) in reals and value is reals[id(value)]:
            saved.append((answers, name, value))
            answers[name] = wrap(value)
    try:
        yield
    finally:
        for where, name, real in reversed(saved):
            if isinstance(where, dict):
                where[name] = real
            else:
                setattr(where, name, real)
        unmark(ctx, "in_collective")


def blocked_or_returned(ctx, ranks) -> bool:
    return all(marked(ctx, "in_collective", r) or marked(ctx, "returned", r) for r in ranks)
