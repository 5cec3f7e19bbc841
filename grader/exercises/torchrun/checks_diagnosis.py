"""Checks of 04_torchrun, diagnose_hang: read the staged dumps of a hung job, name the rank behind and the
collective it never called. Pure Python in one rank: the dumps are staged by grader.exercises.torchrun.hangs, the
answers follow from how each hang was built, and one run answers every staged hang of a check."""

from __future__ import annotations

import copy
import numbers
import random

from grader.checks import CheckFailed
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.hangs import EXAMPLES, Hang, disguised, stage

CONTRACT = (
    "return a tuple (rank, collective_seq_id, profiling_name): the rank that is behind, and the sequence "
    "number and name of the collective it never called, as the other ranks recorded it"
)
AHEAD = (
    "with NCCL a rank's CPU only enqueues work for its GPU, so the ranks that are waiting may have enqueued "
    "several collectives past the one that hangs: a high sequence number marks a rank that waits, not the "
    "one that is behind. The rank behind is the one whose newest entry has the lowest collective_seq_id"
)


def _plain(value) -> dict:
    """In a rank: the student's answer as plain Python values, or what it was instead."""
    if isinstance(value, (tuple, list)) and len(value) == 3:
        rank, seq, name = value
        if all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in (rank, seq)) and isinstance(
            name, str
        ):
            return {"answer": [int(rank), int(seq), str(name)[:200]]}
    return {"returned": f"{type(value).__name__} {str(value)[:120]}"}


def _diagnose_each(ctx, student, scenarios: list[dict]) -> list[dict]:
    """In a rank: diagnose_hang on each staged hang (a fresh copy each: the function may modify it)."""
    fn = student.task("diagnose_hang")
    results = []
    for dumps in scenarios:
        try:
            results.append(_plain(fn(copy.deepcopy(dumps))))
        except NotImplementedError:
            results.append({"error": "NotImplementedError"})
        except Exception as exc:  # noqa: BLE001 - the student's bug, reported as such
            results.append({"error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    return results


def verdict(hang: Hang, result, where: str) -> str | None:
    """None when the answer is right, else what is likely wrong."""
    if not isinstance(result, dict):
        result = {}
    if result.get("error") == "NotImplementedError":
        return "diagnose_hang raises NotImplementedError: replace the stub with your code"
    if isinstance(result.get("error"), str):
        note = " (a rank that never called a collective has an empty `entries` list)" if hang.missing_seq == 1 else ""
        return f"diagnose_hang raised {result['error']} {where}{note}"
    answer = result.get("answer")  # checked again here: a rank's value is the student's to forge
    if not (
        type(answer) is list
        and len(answer) == 3
        and type(answer[0]) is int
        and type(answer[1]) is int
        and type(answer[2]) is str
    ):
        return f"diagnose_hang returned {str(result.get('returned', 'something else'))[:150]} {where}; {CONTRACT}"
    rank, seq, name = answer
    behind, missing, missing_name = hang.answer()
    newest = {r: hang.newest(r) for r in range(hang.world_size)}
    if rank != behind:
        if rank not in newest:
            return f"rank {rank} is not a rank of the job {where} (ranks 0 to {hang.world_size - 1})"
        return _wrong_rank(hang, rank, newest, where)
    if (seq, name) == (missing, missing_name):
        return None
    if seq == missing - 1 and hang.last_completed() is not None:
        return (
            f"the right rank {where}, but seq {seq} is the last collective every rank completed; the hang is in "
            f"the next one, seq {missing}, which rank {behind} never called: it is in the other ranks' entries "
            'only (state "started")'
        )
    if seq == missing:
        previous = hang.last_completed()
        note = (
            " (it is the name of the last collective every rank completed)" if previous and name == previous[1] else ""
        )
        return (
            f"the right rank and seq {where}, but the name {name!r} is not what the other ranks recorded for "
            f"seq {missing}{note}: return that entry's profiling_name as it is"
        )
    if seq > missing:
        return (
            f"the right rank {where}, but seq {seq} is not the collective it missed: it missed the first one it "
            "never called (its newest seq + 1), not one the other ranks enqueued later"
        )
    return f"the right rank {where}, but seq {seq} is not the collective it never called"


def _wrong_rank(hang: Hang, rank: int, newest: dict[int, int], where: str) -> str:
    """Why `rank`, which is not behind, may have been named: each reading of the dumps it fits."""
    kept = {r: min(n, hang.buffer) for r, n in newest.items()}  # entries in each rank's ring buffer
    readings = []
    if rank == 0:
        readings.append("you assumed rank 0 (any rank can be behind: read the dumps)")
    if newest[rank] == max(newest.values()):
        readings.append(
            "you took the rank that enqueued the most collectives (with NCCL a rank's CPU only "
            "enqueues work for its GPU, so a rank that waits may have enqueued several collectives "
            "past the one that hangs)"
        )
    fewest, tie = min(kept.values()), len(set(kept.values())) == 1
    if kept[rank] == fewest and (not tie or rank == min(kept, key=kept.get)):
        readings.append(
            "you counted entries ("
            + (f"every rank holds {fewest} here" if tie else f"rank {rank} holds the fewest, {fewest}")
            + ": the ring buffer keeps only the newest "
            "entries, so their number does not tell who is behind)"
        )
    head = (
        f"you named rank {rank} {where}, which is not behind: its newest collective is seq {newest[rank]}, "
        "and another rank's is lower"
    )
    if not readings:
        return f"{head}. {AHEAD}"
    return (
        f"{head}. Likely cause: {'; or '.join(readings)}. The rank behind is the one whose newest entry has the "
        "lowest collective_seq_id"
    )


def check_hangs(g, hangs: list[Hang], what: str) -> None:
    results = g.run(_diagnose_each, [stage(h) for h in hangs], world_size=1, init_group=False)[0]
    if not isinstance(results, list) or len(results) != len(hangs):
        raise CheckFailed(f"diagnose_hang was not run on every staged hang ({CONTRACT})")
    for i, (hang, result) in enumerate(zip(hangs, results)):
        problem = verdict(hang, result, f"in {what} {i + 1} ({hang.world_size} ranks)")
        if problem:
            raise CheckFailed(problem)


def public_hangs(rng: random.Random) -> list[Hang]:
    """The notebook's three hung jobs, disguised afresh at each grading (ranks relabeled, sequence numbers
    shifted): the same traps, answers no list of the examples holds."""
    return [disguised(hang, rng) for hang in EXAMPLES]


@EXERCISE.check("diagnose_hang", points=1)
def diagnose_hang_names_the_rank_behind(g):
    """The three hung jobs of the notebook (4, 2 and 8 ranks), with their ranks relabeled and their sequence
    numbers shifted at each grading: the rank behind, the seq and name of the collective it never called."""
    check_hangs(
        g,
        public_hangs(random.Random(random.SystemRandom().randrange(2**63))),
        "the notebook's example (ranks relabeled, sequence numbers shifted)",
    )
