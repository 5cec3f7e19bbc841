"""Where the ranks' collectives stopped pairing up, in the student's code: for a hang or a gloo abort.

Collectives of one process group pair up in call order on every rank. From each rank's record (flight_recorder.py:
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

from grader.engine import flight_recorder, stacks
from grader.engine.source_lines import code_at, rank_conditions
from grader.i18n import _, ngettext

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

    @property
    def ddp_backward(self) -> bool:
        """An all-reduce torch's autograd made inside the student's backward() call: DDP's gradient all-reduce."""
        inner = self.frames[: self.frames.index(self.mine)] if self.mine else ()
        return self.kind == "all_reduce" and any("torch" + "/autograd/" in f[0].replace("\\", "/") for f in inner)

    @property
    def origin(self) -> tuple | None:
        """Where the student's code made it: (file, line, made by DDP's backward), None outside their code."""
        return (self.mine[0], self.mine[1], self.ddp_backward) if self.mine else None

    def said(self) -> str:
        mine = self.mine
        if mine is None:
            grader = next((f for f in self.frames if stacks.course_path(f[0]).startswith("grader/")), None)
            if grader:
                return _(
                    "{kind} (the grader's, {place}, outside your code)", kind=self.kind, place=stacks.place(*grader[:2])
                )
            return _("{kind} (the grader's, outside your code)", kind=self.kind)
        where = {"function": mine[2], "place": stacks.place(mine[0], mine[1])}
        code = code_at(mine[0], mine[1])
        if self.ddp_backward and code:
            return _("the gradient all-reduce DDP runs inside `{code}` (your {function}, {place})", code=code, **where)
        if self.ddp_backward:  # the line's source is unknown: never an empty quote
            return _("the gradient all-reduce DDP runs inside your backward() call (your {function}, {place})", **where)
        if code:
            return _("{kind} `{code}` (your {function}, {place})", kind=self.kind, code=code, **where)
        return _("{kind} (your {function}, {place})", kind=self.kind, **where)

    def short(self) -> str:
        """For the list of a rank's collectives: its place and code."""
        code = code_at(self.mine[0], self.mine[1])
        place = stacks.place(self.mine[0], self.mine[1])
        if self.ddp_backward:
            return _("DDP's all_reduce in `{code}` ({place})", code=code, place=place)
        return (
            _("{kind} `{code}` ({place})", kind=self.kind, code=code, place=place) if code else f"{self.kind} ({place})"
        )


def _steps(report) -> list[_Step] | None:
    """A rank's collectives in order (the default group's, then the others'), or for a rank without a record
    that ended or hung in a collective, that one collective alone (from its stack)."""
    recorded = flight_recorder.calls(getattr(report, "calls", ""))
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
            lines += _say_difference(first, last, result)
        elif all(last.values()) and len({s[0].origin for s in last.values()}) > 1:
            lines += _say_paired(last, known)
        elif all(last.values()):
            called = "; ".join(
                _("rank {rank} called {call}", rank=rank, call=s[0].said()) for rank, s in sorted(last.items())
            )
            lines.append(
                _(
                    "the same collective on every rank, with tensors of different sizes{sizes}: {called} (do the "
                    "ranks go through their tensors in the same order, with the same shapes?)",
                    sizes=_sizes(result),
                    called=called,
                )
            )
    else:
        first = _first_difference(known)
        if first is not None:
            lines += _say_difference(first, known, result)
    lines.append(
        _("collectives in your code: {ranks}", ranks="; ".join(_made(rank, own) for rank, own in sorted(known.items())))
    )
    return lines


def _made(rank: int, own: list[_Step]) -> str:
    """What one rank made in the student's code: how many, then the last ones, repeats counted."""
    mine = [s for s in own if s.mine]
    if not mine:
        return _("rank {rank} made none", rank=rank)
    if mine[-1].alone:
        return _("rank {rank} stopped in {call}", rank=rank, call=mine[-1].short())
    shown = mine[-MAX_LISTED:]
    groups: list[list] = []
    for step in shown:
        if groups and groups[-1][0].origin == step.origin and groups[-1][0].kind == step.kind:
            groups[-1].append(step)
        else:
            groups.append([step])
    listed = ", ".join(g[0].short() + (f" ×{len(g)}" if len(g) > 1 else "") for g in groups)
    if len(mine) > len(shown):
        return _(
            "rank {rank} made {n}, the last {shown}: {listed}", rank=rank, n=len(mine), shown=len(shown), listed=listed
        )
    return ngettext(
        "rank {rank} made {n}: {listed}", "rank {rank} made {n}: {listed}", len(mine), rank=rank, listed=listed
    )


def _say_paired(last: dict, known: dict) -> list[str]:
    """A collective one rank made where another made a different one of the student's code: paired anyway. How
    many of the student's calls came before the pair, from a rank whose whole record is known (an aborted rank's
    is not): the ranks' calls pair up in order, so it is the count on every rank."""
    (a_rank, (a,)), (b_rank, (b,)) = sorted(last.items())[:2]
    text = _(
        "rank {a_rank} called {a} while rank {b_rank} was in {b}: these two different calls paired up, "
        "because a rank skipped a collective that the others made (every rank must make the same collectives, "
        "in the same order)",
        a_rank=a_rank,
        a=a.said(),
        b_rank=b_rank,
        b=b.said(),
    )
    counted = next(((rank, known[rank]) for rank in (b_rank, a_rank) if not known[rank][-1].alone), None)
    if counted is not None:
        rank, steps = counted
        text += "; " + ngettext(
            "rank {rank} made {n} call in your code before this one",
            "rank {rank} made {n} calls in your code before this one",
            sum(1 for step in steps[:-1] if step.mine),
            rank=rank,
        )
    return [text] + _conditions([a, b])


def _conditions(steps: list[_Step]) -> list[str]:
    """For each step of the student's code under a rank-dependent `if`: that it runs on some ranks only."""
    said = []
    for step in steps:
        if step.mine is None:
            continue
        for line, test, in_body in rank_conditions(step.mine[0], step.mine[1]):
            text = _(
                "line {line} (`{code}`) runs only where `{test}` is {value} (line {if_line}): not on every rank",
                line=step.mine[1],
                code=code_at(step.mine[0], step.mine[1]),
                test=test,
                value="True" if in_body else "False",
                if_line=line,
            )
            if text not in said:
                said.append(text)
    return said


def _first_difference(known: dict) -> int | None:
    longest = max((len(s) for s in known.values()), default=0)
    for i in range(longest):
        here = [s[i] if i < len(s) else None for s in known.values()]
        if any(h is None for h in here) or len({(h.kind, h.mine is None) for h in here}) > 1:
            return i
    return None


def _say_difference(i: int, known: dict, result) -> list[str]:
    made = {rank: (s[i] if i < len(s) else None) for rank, s in known.items()}
    in_mine = [rank for rank, step in made.items() if step is not None and step.mine]
    others = [rank for rank in made if rank not in in_mine]
    if in_mine and others:
        lead = in_mine[0]
        step = made[lead]
        text = _(
            "rank {rank} called {call} that {others} never called in your code",
            rank=lead,
            call=step.said(),
            others=_ranks(others),
        )
        gone = []
        for rank in others:
            theirs = made[rank]
            status = next((r.status for r in result.ranks if r.rank == rank), "")
            if theirs is not None:
                gone.append(
                    _(
                        "rank {rank} had gone on to the next step: its {kind} there was the grader's, after your code "
                        "returned (the two met, and the ranks fell out of step)",
                        rank=rank,
                        kind=theirs.kind,
                    )
                )
            elif status == "ok":
                gone.append(_("rank {rank} went on to the next step and finished", rank=rank))
            else:
                gone.append(_("rank {rank} made no collective there", rank=rank))
        return [text + "; " + "; ".join(gone)] + _conditions([step])
    called = "; ".join(
        _("rank {rank} called {call}", rank=rank, call=step.said()) if step else _("rank {rank} called none", rank=rank)
        for rank, step in sorted(made.items())
    )
    before = ngettext("{n} call that paired up", "{n} calls that paired up", i, n=i)
    text = _("the ranks' collective #{n} differs ({before} before it): {called}", n=i + 1, before=before, called=called)
    return [text] + _conditions([s for s in made.values() if s is not None])


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return _("rank {rank}", rank=ranks[0])
    return _("ranks {ranks}", ranks=", ".join(map(str, ranks)))


_GLOO_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")


def _sizes(result) -> str:
    """gloo's words on the sizes, from an aborted rank's output: " (gloo got 48 bytes where it expected 4)"."""
    for r in result.ranks:
        found = _GLOO_SIZES.search(r.output or "")
        if found:
            return " " + _(
                "(gloo's rank {rank} received {got} bytes where it expected {expected})",
                rank=r.rank,
                got=found[1],
                expected=found[2],
            )
    return ""
