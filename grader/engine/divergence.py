"""Where the ranks' collectives stopped pairing up, in the student's code: for a hang or a gloo abort.

Collectives of one process group pair up in call order on every rank. From each rank's record (flight.py:
every collective with where it was called; for a rank that aborted, where its stack was) this finds the
first call at which the ranks differ (another kind of collective, one made in the student's code and the
other in the grader's, or none at all) and says so in the student's terms:

    rank 0 called barrier (your save_checkpoint, cell 29, line 4) that rank 1 never called in your code;
    rank 1 had gone on to the next step: its barrier there was the grader's, after your code returned

A record is a rank's text: it shapes a public check's message, never a verdict, and a hidden check never
shows it (grading.describe_failure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.engine import flight, stacks

MAX_LISTED = 6  # a rank's collectives in the student's code, the last ones, in the summary line


@dataclass(frozen=True)
class _Step:
    kind: str
    frames: tuple  # (file, line, function), innermost first
    done: bool = True
    alone: bool = False  # known from the rank's stack only (it died): its last collective, not its sequence

    @property
    def mine(self) -> tuple | None:
        """The innermost frame in the student's code, if any."""
        return next((f for f in self.frames if stacks.is_student_file(f[0])), None)

    def said(self) -> str:
        mine = self.mine
        if mine is None:
            grader = next((f for f in self.frames if stacks.course_path(f[0]).startswith("grader/")), None)
            return f"{self.kind} (the grader's{', ' + stacks.place(*grader[:2]) if grader else ''}, outside your code)"
        return f"{self.kind} (your {mine[2]}, {stacks.place(mine[0], mine[1])})"


def _steps(report) -> list[_Step] | None:
    """A rank's collectives in order (the default group's, then the others'), or for a rank without a record
    that ended or hung in a collective, that one collective alone (from its stack)."""
    recorded = flight.calls(getattr(report, "calls", ""))
    if recorded is not None and (recorded or report.status == "ok"):  # a rank that finished may have made none
        ordered = sorted(recorded, key=lambda c: (c.group != "0", c.group, c.seq))
        return [_Step(c.kind, c.frames, c.done) for c in ordered]
    frames = stacks.main_frames(report.stack or "")
    torch_call = next(
        (f for f in frames if "torch" + "/distributed/" in f[0].replace("\\", "/") and f[2] != "wrapper"), None
    )
    return [_Step(torch_call[2], tuple(frames), False, alone=True)] if torch_call else None


def explain(result) -> list[str]:
    """Sentences on where the ranks' collectives diverge, the student's code first; [] when nothing is known."""
    ranks = [r for r in result.ranks if r.status != "stopped" or getattr(r, "calls", "")]
    steps = {r.rank: _steps(r) for r in ranks}
    known = {rank: s for rank, s in steps.items() if s is not None}
    if len(known) < 2 and not any(s and not s[-1].done and s[-1].mine for s in known.values()):
        return []
    lines = []
    if any(s and s[-1].alone for s in known.values()):  # a rank that died: its last collective met the others' last
        last = {rank: s[-1:] for rank, s in known.items()}
        first = _first_difference(last)
        if first is not None:
            lines.append(_say_difference(first, last, result))
        elif all(last.values()):
            called = "; ".join(f"rank {rank} called {s[0].said()}" for rank, s in sorted(last.items()))
            lines.append(
                f"the same collective on every rank, with tensors of different sizes{_sizes(result)}: "
                f"{called} (do the ranks go through their tensors in the same order, with the same shapes?)"
            )
    else:
        first = _first_difference(known)
        if first is not None:
            lines.append(_say_difference(first, known, result))
    summary = []
    for rank, own in sorted(known.items()):
        mine = [s for s in own if s.mine]
        listed = ", ".join(f"{s.kind} ({stacks.place(s.mine[0], s.mine[1])})" for s in mine[-MAX_LISTED:])
        more = f"{len(mine) - MAX_LISTED} earlier, then " if len(mine) > MAX_LISTED else ""
        summary.append(f"rank {rank} made {more}{listed}" if mine else f"rank {rank} made none")
    lines.append("collectives in your code: " + "; ".join(summary))
    return lines


def _first_difference(known: dict) -> int | None:
    longest = max((len(s) for s in known.values()), default=0)
    for i in range(longest):
        here = [s[i] if i < len(s) else None for s in known.values()]
        if any(h is None for h in here) or len({(h.kind, h.mine is None) for h in here}) > 1:
            return i
    return None


def _say_difference(i: int, known: dict, result) -> str:
    made = {rank: (s[i] if i < len(s) else None) for rank, s in known.items()}
    in_mine = [rank for rank, step in made.items() if step is not None and step.mine]
    others = [rank for rank in made if rank not in in_mine]
    if in_mine and others:
        lead = in_mine[0]
        step = made[lead]
        text = f"rank {lead} called {step.said()} that {_ranks(others)} never called in your code"
        gone = []
        for rank in others:
            theirs = made[rank]
            status = next((r.status for r in result.ranks if r.rank == rank), "")
            if theirs is not None:
                gone.append(
                    f"rank {rank} had gone on to the next step: its {theirs.kind} there was the grader's, "
                    "after your code returned (the two met, and the ranks fell out of step)"
                )
            elif status == "ok":
                gone.append(f"rank {rank} went on to the next step and finished")
            else:
                gone.append(f"rank {rank} made no collective there")
        return text + "; " + "; ".join(gone)
    called = "; ".join(
        f"rank {rank} called {step.said()}" if step else f"rank {rank} called none"
        for rank, step in sorted(made.items())
    )
    return f"the ranks' collective #{i + 1} differs: {called}"


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


_GLOO_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")


def _sizes(result) -> str:
    """gloo's words on the sizes, from an aborted rank's output: " (gloo got 48 bytes where it expected 4)"."""
    for r in result.ranks:
        found = _GLOO_SIZES.search(r.output or "")
        if found:
            return f" (gloo's rank {r.rank} received {found[1]} bytes where it expected {found[2]})"
    return ""
