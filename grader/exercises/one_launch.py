"""Several checks' runs in one launch, that changes no verdict.

    MINI_PARTS = one_launch.declare("MiniDDP", ((_in_rank_broadcast, ()), (_in_rank_train, ("tiny",))))
    values = one_launch.run(g, MINI_PARTS, _in_rank_train, "tiny")   # as g.run(_in_rank_train, "tiny")

A launch (fresh ranks, a process group, the guard) costs more than a small training run in it, so a task
declares its runs (its parts), and every check asks for its run through run(). When a run grades several
tasks (a whole submission), the first check launches the parts of every declared task of the run at once,
in the order of the checks (shared_runs.py hands the other checks its result), and each check reads its own
part; when that launch fails, the task's own parts are launched together; when that fails too, the check
makes its own run, as it always did. The ranks run the parts in order, each from the random state the rank
started with, and after each part all ranks agree on which part they finished (a fence); so a part sees what
it would in a run of its own, and no collective of one part can pair with another's unseen.

What decides a verdict:
- a failed shared launch (a crash, a hang, an early exit, tampering, a value of the wrong shape) counts for
  nothing: the next level runs, with that level's message. Its timeout is short (ONE_LAUNCH_TIMEOUT_S): a
  slow but correct submission only falls back to the checks' own runs, with their full timeout;
- a check that passes on values of a shared launch passes; a check that fails on them is run again with its
  own runs only (runner.py), and that run decides: what one task's code leaves in a rank (a global it set, a
  hook it registered) can never cost another task's check its points.

Hidden checks declare their parts with hidden=True and their world size: the hidden checks of one run share
a launch of their own (the public ones never run in it). Tasks whose runs do not fit (they start or end the
process group, or bound a hang with a timeout of their own) declare nothing and keep their own runs.
"""

from __future__ import annotations

import random

import torch
import torch.distributed as dist

ONE_LAUNCH_TIMEOUT_S = 15.0
_FENCE = 0x0F3AC3  # in every fence, beside the part's index: a fence paired with another collective shows
_DECLARED: dict[tuple[str, bool], list] = {}  # (task, hidden) -> [((fn, args), world size or None)], in order


def declare(task: str, parts: tuple, hidden: bool = False, world_size: int | None = None) -> tuple:
    """Declare `parts` ((fn, args), ...) as runs of `task`'s checks (hidden ones: at `world_size`); returns parts."""
    declared = _DECLARED.setdefault((task, hidden), [])
    for part in parts:
        if (part, world_size) not in declared:
            declared.append((part, world_size))
    return parts


def run(g, parts: tuple, fn, *args) -> list:
    """g.run(fn, *args): every rank's value, from a launch shared with other runs when one succeeds."""
    part = (fn, args)
    if g.share_launches:
        for group in _groups(g, parts, part):
            shared = _shared_launch(g, group)
            if shared is not None:
                g.read_shared_launch = True
                return shared[group.index(part)]
    return g.run(fn, *args)


def _groups(g, parts: tuple, part: tuple) -> list[tuple]:
    """The launches that could answer `part`, widest first: every declared part of the run's tasks (public, or
    hidden at this world size), then the task's own parts."""
    everyone = tuple(
        dict.fromkeys(
            p for task in g.tasks for p, size in _DECLARED.get((task, g.hidden), ()) if size in (None, g.world_size)
        )
    )
    groups = [everyone] if part in everyone and len(everyone) > 1 else []
    if not g.hidden and part in parts and len(parts) > 1 and tuple(parts) != everyone:
        groups.append(tuple(parts))
    return groups


def _shared_launch(g, parts: tuple) -> list | None:
    """Per part, every rank's value; None when the next level must run (nothing of this launch is kept)."""
    before = (g.hung, g.tampered, len(g.outputs), len(g.notes))
    result = g.run_raw(_in_rank_parts, parts, timeout=min(g.timeout, ONE_LAUNCH_TIMEOUT_S), share_failure=True)
    values = [r.value for r in result.ranks] if result.ok else []
    if result.ok and all(isinstance(v, list) and len(v) == len(parts) for v in values):
        return [[v[i] for v in values] for i in range(len(parts))]
    g.hung, g.tampered = before[0], before[1]  # the check's own run decides (and sees any tampering again)
    del g.outputs[before[2] :], g.notes[before[3] :]
    return None


def _in_rank_parts(ctx, student, parts: tuple) -> list:
    """In every rank: each part in turn, from the random state the rank started with, then a fence."""
    states = torch.get_rng_state(), random.getstate()
    values = []
    for index, (fn, args) in enumerate(parts):
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        values.append(fn(ctx, student, *args))
        _fence(ctx, index)
    return values


def _fence(ctx, index: int) -> None:
    """Every rank has finished part `index`, and the collective that says so met its own kind in every rank."""
    mine = torch.tensor([index, _FENCE], dtype=torch.int64, device=ctx.device)
    everyone = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(everyone, mine)
    if any(t.tolist() != [index, _FENCE] for t in everyone):
        raise RuntimeError(
            f"the ranks were out of step after part {index} of a shared launch: a collective of one "
            "run met another's (the checks make their own runs)"
        )
