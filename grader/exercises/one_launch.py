"""Several runs of a task's public checks in one launch, that changes no verdict.

    PARTS = ((_in_rank_broadcast, ()), (_in_rank_train, ("tiny",)))
    values = one_launch.run(g, PARTS, _in_rank_train, "tiny")   # as g.run(_in_rank_train, "tiny")

A launch (fresh ranks, a process group, the guard) costs more than a small training run in it, so the
checks of one task may ask for all their runs at once: every check names the same PARTS, the first
launches them all in one run (shared_runs.py hands the others its result) and each check reads its own
part. The ranks run the parts in order, each from the random state the rank started with, and after each
part all ranks agree on which part they finished (a fence); so a part sees what it would in a run of its
own, and no collective of one part can pair with another's unseen.

When that launch fails (a crash, a hang, an early exit, tampering, a value of the wrong shape) every check
makes its own run as before, with the run's own message: a mistake in one part fails only its checks, and
the failed launch counts for nothing, but tampering. Its timeout is short (ONE_LAUNCH_TIMEOUT_S): a slow
but correct submission only falls back to its checks' own runs, with their full timeout. A hidden check's
runs are always its own (another phase, another world size). MiniFSDP's checks (checks_fsdp.py) do the same
by hand.
"""
from __future__ import annotations

import random

import torch
import torch.distributed as dist

ONE_LAUNCH_TIMEOUT_S = 15.0
_FENCE = 0x0F3AC3  # in every fence, beside the part's index: a fence paired with another collective shows


def run(g, parts: tuple, fn, *args) -> list:
    """g.run(fn, *args): every rank's value, from the one launch of `parts` when (fn, args) is one of them."""
    if not g.hidden and (fn, args) in parts:
        shared = _shared_launch(g, parts)
        if shared is not None:
            return shared[parts.index((fn, args))]
    return g.run(fn, *args)


def _shared_launch(g, parts: tuple) -> list | None:
    """Per part, every rank's value; None when the check must make its own run."""
    before = (g.hung, len(g.outputs), len(g.notes))
    result = g.run_raw(_in_rank_parts, parts, timeout=min(g.timeout, ONE_LAUNCH_TIMEOUT_S), share_failure=True)
    values = [r.value for r in result.ranks] if result.ok else []
    if result.ok and all(isinstance(v, list) and len(v) == len(parts) for v in values):
        return [[v[i] for v in values] for i in range(len(parts))]
    g.hung = before[0]  # the check's own run decides (tampering, already recorded, still counts)
    del g.outputs[before[1]:], g.notes[before[2]:]
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
        raise RuntimeError(f"the ranks were out of step after part {index} of a shared launch: a collective of one "
                           "run met another's (the checks make their own runs)")
