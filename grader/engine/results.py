"""What a run produced: one RankReport per rank, and the RunResult around them."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from grader.engine import stacks
from grader.engine.plan import HardwarePlan
from grader.i18n import _


def last_output_heading() -> str:
    """Heads an aborted rank's last lines of output (grading.py cuts a message there)."""
    return _("its last output:")


@dataclass
class RankReport:
    """What one rank did. status: ok | error | hung | exited | stopped | unavailable (the machine could not set
    it up: its GPU or process group, before any student code)."""

    rank: int
    status: str = "pending"
    value: Any = None
    error: dict | None = None
    exitcode: int | None = None
    stack: str = ""
    output: str = ""
    calls: str = ""  # the rank's collectives with where they were called (flight_recorder.py), read when the run failed

    def describe(self, kind_only: bool = False) -> str:
        """What happened to this rank, for the student. kind_only: in a hidden test, where nothing the rank
        raised, printed or named may be shown: the kind of failure only."""
        if kind_only:
            return self._describe_hidden()
        if self.status == "unavailable":
            return _("rank {rank} could not run on this machine: {why}", rank=self.rank, why=_first_line(self.error))
        if self.status == "error" and self.error.get("type") == "OutOfMemoryError":
            return _(
                "rank {rank} ran out of GPU memory in your code (are tensors kept across steps, or is the batch too "
                "large for one GPU?): {error}",
                rank=self.rank,
                error=stacks.format_exception(self.error),
            )
        if self.status == "error":
            return _("rank {rank} raised {error}", rank=self.rank, error=stacks.format_exception(self.error))
        if self.status == "hung" and self.error:  # gloo's own timeout fired first: a hang all the same
            frames = self.error.get("student_frames") or []
            where = ", " + _("called from your code at {line}", line=frames[-1]) if frames else ""
            return (
                _(
                    "rank {rank} hung: waiting in {function} for the other ranks until gloo's own timeout gave up",
                    rank=self.rank,
                    function=stacks.collective_timeout(self.error),
                )
                + where
            )
        if self.status == "hung":
            return _("rank {rank} hung: {where}", rank=self.rank, where=stacks.summarize_stack(self.stack))
        if self.status == "exited":
            text = self._exited()
            if self.exitcode == -signal.SIGABRT:
                text += " " + _(
                    "(gloo aborts a process when ranks call different collectives, or send tensors of "
                    "different sizes: do all ranks make the same collective calls in the same order?)"
                )
            tail = [line for line in self.output.strip().splitlines() if line.strip()][-5:]
            return text + (
                "\n" + last_output_heading() + "\n" + "\n".join("  " + line for line in tail) if tail else ""
            )
        if self.status == "stopped":
            return _("rank {rank} was stopped because another rank failed", rank=self.rank)
        return f"rank {self.rank}: {self.status}"

    def _exited(self) -> str:
        return _(
            "rank {rank} exited with {meaning} before returning a result",
            rank=self.rank,
            meaning=exit_meaning(self.exitcode),
        )

    def busy_in_student_code(self) -> bool:
        return self.status == "hung" and not self.error and stacks.busy_frame(self.stack) is not None

    def _describe_hidden(self) -> str:
        if self.status == "unavailable":
            return _("rank {rank} could not run on this machine", rank=self.rank)
        if self.status == "error" and self.error.get("type") == "OutOfMemoryError":
            return _("rank {rank}: your code ran out of GPU memory", rank=self.rank)
        if self.status == "error":
            return _("rank {rank}: your code raised an exception (hidden tests do not show its text)", rank=self.rank)
        if self.status == "hung":
            where = _("busy in your code") if self.busy_in_student_code() else _("waiting for the other ranks")
            return _("rank {rank} hung: {where}", rank=self.rank, where=where)
        if self.status == "exited":
            return self._exited()
        if self.status == "stopped":
            return _("rank {rank} was stopped because another rank failed", rank=self.rank)
        return f"rank {self.rank}: {self.status}"


def _first_line(error: dict | None) -> str:
    text = f"{(error or {}).get('type', '')}: {(error or {}).get('message', '')}".strip(": ")
    return (text.splitlines() or ["an unknown error"])[0][:300]


def exit_meaning(code: int | None) -> str:
    if code is None:
        return _("no exit code")
    if code < 0:
        try:
            return _("signal {signal}", signal=signal.Signals(-code).name)
        except ValueError:
            return _("signal {signal}", signal=-code)
    return _("code {code} (did the code call sys.exit or os._exit?)", code=code)


@dataclass
class RunResult:
    ranks: list[RankReport]
    plan: HardwarePlan
    seconds: float
    notes: list[str] = field(default_factory=list)
    hidden: bool = False  # a hidden test's run: grading.describe_failure shows no text of the ranks

    @property
    def backend(self) -> str:
        return self.plan.backend

    @property
    def hung(self) -> bool:
        return any(r.status == "hung" for r in self.ranks)

    @property
    def tampered(self) -> bool:
        return any(r.error and r.error.get("type") == "Tampered" for r in self.ranks)

    @property
    def unavailable(self) -> bool:
        """The machine could not run it (a GPU or process group that could not be set up): nobody's answer."""
        return any(r.status == "unavailable" for r in self.ranks)

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.ranks)

    @property
    def values(self) -> list:
        if not self.ok:
            raise RunFailed(self)
        return [r.value for r in self.ranks]

    def failure(self, kind_only: bool = False) -> str:
        """The first real failure (a crash or hang, not a rank stopped by it). kind_only (a hidden test): its kind only."""
        bad = [r for r in self.ranks if r.status not in ("ok", "stopped")]
        return "\n\n".join(r.describe(kind_only) for r in bad) or "no failure"


class RunFailed(RuntimeError):
    def __init__(self, result: RunResult):
        self.result = result
        super().__init__(result.failure())
