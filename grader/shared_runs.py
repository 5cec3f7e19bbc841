"""Launches shared by the checks of a submission: the engine's business, never a check author's.

A check asks for a run with `g.run(fn, *args)` and nothing else; two things make that cheaper, and neither
changes a verdict.

The same run, launched once (SharedRuns). Several checks of a task run the same rank function with the same
arguments and judge different things in its result (save_checkpoint's three checks, train_one_epoch's three,
...). The check runner gives every check of one submission the same SharedRuns in place of run_distributed:
the first check that asks for a run launches it, a later one with the same function, arguments, world size,
timeout and group gets a deep copy of its result (checks may mutate what they read). Checks whose runs pass
files to each other (a checkpoint saved by one run, loaded by the next) ask for a folder by name (folder(),
through `g.folder(shared_as=...)`): the same path for every check of the submission, so that their first run
is the same run, shared; close() removes the folders when the checks are done. Only a run in which every rank
reported a value, or that hung, is shared. A run that failed otherwise (a crash, an early exit, tampering) is
never reused: the next check that asks launches it again, exactly as when every check had its own launch. A
hang is shared: the same ranks running the same code would wait the same way, so the task's other checks
asking for that run are answered from it (the same message, 0 points) instead of each waiting out a timeout
of its own; a check asking for a different run still runs it.

The same parent-side job, made once (parent_job). A check that runs a job itself, outside the ranks (04_torchrun's
torchrun scenarios), asks parent_job(g, key, make): the checks of a submission asking with the same key share
what the first one made, unless it was cut by its bound (keep).

Different runs, in one launch (shared_answer). A launch (fresh ranks, a process group, the guard) costs more
than a small training run in it, so an exercise declares which runs a task's checks ask for:

    EXERCISE.declare_runs("MiniDDP", ((_in_rank_broadcast, ()), (_in_rank_train, ("tiny",))))

and `g.run(_in_rank_train, "tiny")` is then answered from a launch that makes them all. When a run grades
several tasks (a whole submission), the first check launches the declared runs (parts) of every task of the
run at once, in the order of the checks (SharedRuns hands the other checks its result), and each check reads
its own part; when that launch fails, the task's own parts are launched together; when that fails too, the
check makes its own run, as it always did. The ranks run the parts in order, each from the random state the
rank started with, and after each part all ranks agree on which part they finished (a fence); so a part sees
what it would in a run of its own, and no collective of one part can pair with another's unseen.
- a failed shared launch (a crash, a hang, an early exit, tampering, a value of the wrong shape) counts for
  nothing: the next level runs, with that level's message. Its timeout is short (SHARED_LAUNCH_TIMEOUT_S): a
  slow but correct submission only falls back to the checks' own runs, with their full timeout;
- a check that passes on values of a shared launch passes; a check that fails on them is run again with its
  own runs only (runner.py), and that run decides: what one task's code leaves in a rank (a global it set, a
  hook it registered) can never cost another task's check its points.
Hidden checks declare their parts with hidden=True and their world size: the hidden checks of one run share a
launch of their own (the public ones never run in it). Tasks whose runs do not fit (they start or end the
process group, or bound a hang with a timeout of their own) declare nothing and keep their own runs; so does a
run asked with its own world size, timeout or init_group.
"""

from __future__ import annotations

import copy
import os
import random
import shutil
import tempfile
import threading

import cloudpickle
import torch
import torch.distributed as dist

from grader.engine import RunResult, run_distributed

SHARED_LAUNCH_TIMEOUT_S = 15.0  # a correct shared launch takes about a second; a slower one falls back
_FENCE = 0x0F3AC3  # in every fence, beside the part's index: a fence paired with another collective shows


class SharedRuns:
    """run_distributed's signature; launches counts the runs started, reused the ones answered from an earlier."""

    shares_failures = True  # takes share_failure= (Grading.run_raw asks without importing this runner-layer class)

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict[bytes, _Entry] = {}
        self.launches = 0
        self.reused = 0
        self._folders: dict[str, str] = {}
        self._jobs: dict = {}  # job(): the parent's own jobs, by key
        self._closed = False

    def __call__(
        self,
        fn,
        world_size: int = 2,
        args: tuple = (),
        kwargs: dict | None = None,
        share_failure: bool = False,
        **options,
    ) -> RunResult:
        try:  # the key: what the ranks would receive, and how they would run
            key = cloudpickle.dumps(
                (fn, tuple(args), dict(kwargs or {}), world_size, sorted(options.items()), share_failure)
            )
        except Exception:
            return run_distributed(fn, world_size, args, kwargs, **options)  # raises the usual TypeError
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
        with entry.lock:  # checks side by side (a notebook): the second waits for the first's run
            if entry.result is not None:
                self.reused += 1
                return copy.deepcopy(entry.result)
            self.launches += 1
            result = run_distributed(fn, world_size, args, kwargs, **options)
            if result.ok or share_failure or result.hung:
                entry.result = copy.deepcopy(result)
            return result

    def job(self, key, make, keep):
        """A job the parent runs itself (a torchrun job of the grader's), made once for every check of the
        submission that asks with the same key: (value, shared). keep(value) False: not shared (the next check
        makes its own)."""
        with self._lock:
            entry = self._jobs.setdefault(key, _Entry())
        with entry.lock:
            if entry.result is not None:
                self.reused += 1
                return copy.deepcopy(entry.result), True
            value = make()
            if keep(value):
                entry.result = copy.deepcopy(value)
            return value, False

    def folder(self, name: str) -> str:
        """The path the checks of this submission share under `name` (not created: the runs write it)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the checks of this submission are over: no folder is shared any more")
            if name not in self._folders:
                self._folders[name] = tempfile.mkdtemp(prefix="grader-shared-")
            return os.path.join(self._folders[name], name)

    def close(self) -> None:
        """Remove the shared folders (the checks are done, or interrupted: their runs end on their own)."""
        with self._lock:
            folders, self._folders, self._closed = list(self._folders.values()), {}, True
        for root in folders:
            shutil.rmtree(root, ignore_errors=True)


class _Entry:
    def __init__(self):
        self.lock = threading.Lock()
        self.result: RunResult | None = None


def parent_job(g, key, make, keep=lambda value: True):
    """What make() returns, made once per submission for every check that asks with the same key (checks of
    04_torchrun judge different things in one torchrun scenario); a check confirming its failure (its own runs
    only) makes its own. keep(value) False: that value is not shared (a job cut by its bound: bad luck is never
    passed on to other checks)."""
    job = getattr(g.launcher, "job", None)
    if job is None or not g.share_launches:
        return make()
    return job(key, make, keep)[0]


def shared_answer(g, part: tuple) -> list | None:
    """`part` (fn, args) answered from a launch shared with other declared runs: every rank's value, or None when
    the check must make its own run (nothing shared, or every shared launch failed)."""
    for group in _groups(g, part):
        shared = _shared_launch(g, group)
        if shared is not None:
            g.read_shared_launch = True
            return shared[_index(group, part)]
    return None


def _index(parts: tuple, part: tuple) -> int | None:
    """Where `part` is among `parts`: the same function, and arguments equal to the declared ones (an argument that
    cannot say so, a tensor of several values, makes it undeclared: the check's own run answers it)."""
    for i, (fn, args) in enumerate(parts):
        asked = part[1]
        if fn is part[0] and len(args) == len(asked) and all(type(a) is type(b) for a, b in zip(args, asked)):
            try:
                if bool(args == asked):
                    return i
            except Exception:  # noqa: BLE001 - an argument whose == is not a truth value
                continue
    return None


def _groups(g, part: tuple) -> list[tuple]:
    """The launches that could answer `part`, widest first: every declared part of the run's tasks (public, or
    hidden at this world size), then the parts of the check's own task."""
    declared = g.declared_runs

    def parts_of(tasks) -> tuple:
        return tuple(
            dict.fromkeys(
                p for task in tasks for p, size in declared.get((task, g.hidden), ()) if size in (None, g.world_size)
            )
        )

    everyone = parts_of(g.tasks)
    groups = [everyone] if _index(everyone, part) is not None and len(everyone) > 1 else []
    own = parts_of([g.task]) if g.task else ()
    if not g.hidden and _index(own, part) is not None and len(own) > 1 and own != everyone:
        groups.append(own)
    return groups


def _shared_launch(g, parts: tuple) -> list | None:
    """Per part, every rank's value; None when the next level must run (nothing of this launch is kept)."""
    before = (g.hung, g.tampered, len(g.outputs), len(g.notes))
    result = g.run_raw(_in_rank_parts, parts, timeout=min(g.timeout, SHARED_LAUNCH_TIMEOUT_S), share_failure=True)
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
