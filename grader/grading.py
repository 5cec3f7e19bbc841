"""The one seam between a check and the student's code (CS336's adapters, for ranks).

A check's parent-side code calls `g.run(fn, *args)`; every rank then loads the
submission, runs `fn(ctx, student, *args)` and returns one value per rank.
`student.task(name)` is the student's definition. A crash, a hang, a missing
task or a submission that tampers with the grader becomes a CheckFailed whose
message says what went wrong and where.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable

from grader.checks import CheckFailed
from grader.engine import RunResult, run_distributed
from grader.engine.plan import HardwarePlan, current_plan
from grader.submission import LoadReport, Submission


class MissingTask(Exception):
    pass


class Student:
    """The student's definitions inside a rank. A function task is returned wrapped:
    after each call the grader's own objects are verified (integrity.Guard)."""

    def __init__(self, namespace, report: LoadReport, guard=None):
        self._ns = namespace
        self.report = report
        self._guard = guard

    def task(self, name: str):
        try:
            value = getattr(self._ns, name)
        except AttributeError:
            hint = ("; while loading your answers: " + "; ".join(self.report.problems)) if self.report.problems else ""
            raise MissingTask(f"`{name}` is not defined in your answers{hint}") from None
        guard = self._guard
        if guard is None or isinstance(value, type) or not callable(value):
            return value  # a class keeps its identity (isinstance, subclassing); the run's end verifies it

        @functools.wraps(value)
        def verified(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            finally:
                guard.verify(f"in `{name}`", grader_only=True)

        return verified


def _call_with_student(ctx, submission: Submission, fn: Callable, args: tuple):
    """Runs in every rank: load the answers, verify, run the check's rank code."""
    namespace, report = submission.load()
    if ctx.guard is not None:
        ctx.guard.verify("while your answers loaded")
    return fn(ctx, Student(namespace, report, ctx.guard), *args)


def _load_only(ctx, submission: Submission) -> dict:
    report = submission.load()[1]
    if ctx.guard is not None:
        ctx.guard.verify("while your answers loaded")
    return vars(report)


class Grading:
    """What a check function gets: the submission and how to run it."""

    def __init__(self, submission: Submission, world_size: int = 2, timeout: float = 30.0,
                 parent_lock: threading.Lock | None = None, keep_output: bool = False):
        self.submission = submission
        self.world_size = world_size
        self.timeout = timeout
        self.notes: list[str] = []
        self.plans: list[str] = []  # the plan of each run, described
        self.outputs: list[list[str]] = []  # what each rank printed, per run (keep_output)
        self.tampered = False
        self.hung = False
        self.load_report: LoadReport | None = None
        self.load_failure: str | None = None
        self._parent_lock = parent_lock  # checks side by side: only one runs parent-side code at a time
        self._keep_output = keep_output

    def plan(self, world_size: int | None = None) -> HardwarePlan:
        """The hardware plan a run of this check gets (backend, device per rank)."""
        return current_plan(world_size or self.world_size)

    def preflight(self) -> None:
        """Execute the answers once, alone, to learn what they define."""
        result = run_distributed(_load_only, 1, (self.submission,), timeout=self.timeout, init_group=False,
                                 trusted=False)
        value = result.ranks[0].value if result.ok else None
        if result.ok and isinstance(value, dict) and set(value) == {"defined", "problems"}:
            self.load_report = LoadReport(**value)
        elif result.ok:
            self.load_failure = "loading your answers sent back something that is not the grader's report"
        else:
            self.tampered = result.tampered
            self.load_failure = "loading your answers failed: " + result.failure().replace("rank 0 ", "it ", 1)

    def run_raw(self, fn: Callable, *args, world_size: int | None = None, timeout: float | None = None,
                init_group: bool = True) -> RunResult:
        if self._parent_lock:
            self._parent_lock.release()  # other checks' parent-side code may run while our ranks work
        try:
            result = run_distributed(_call_with_student, world_size or self.world_size,
                                     (self.submission, fn, args), timeout=timeout or self.timeout,
                                     init_group=init_group, trusted=False)
        finally:
            if self._parent_lock:
                self._parent_lock.acquire()
        self.notes += result.notes
        if result.plan.describe() not in self.plans:
            self.plans.append(result.plan.describe())
        if self._keep_output:
            self.outputs.append([r.output for r in result.ranks])
        self.tampered |= result.tampered
        self.hung |= result.hung
        return result

    def run(self, fn: Callable, *args, world_size: int | None = None, timeout: float | None = None,
            init_group: bool = True, hint: str = "") -> list:
        """Run fn(ctx, student, *args) on every rank; a failure becomes a CheckFailed."""
        result = self.run_raw(fn, *args, world_size=world_size, timeout=timeout, init_group=init_group)
        if not result.ok:
            raise CheckFailed(describe_failure(result, hint))
        return [r.value for r in result.ranks]


def describe_failure(result: RunResult, hint: str = "") -> str:
    errors = [r.error for r in result.ranks if r.status == "error" and r.error]
    tampered = [e for e in errors if e["type"] == "Tampered"]
    if tampered:
        return tampered[0]["message"]
    if errors and errors[0]["type"] in ("MissingTask", "CheckFailed"):
        return errors[0]["message"]
    if errors and errors[0]["type"] == "NotImplementedError":
        where = errors[0]["student_frames"][-1] if errors[0]["student_frames"] else ""
        return "not implemented yet: your code raises NotImplementedError" + (f" ({where})" if where else "")
    text = result.failure()
    if result.hung:
        text = "the run did not finish in time (a deadlock: ranks waiting in different collectives, or a " \
               "collective only some ranks call?)\n" + text
    return f"{hint}\n{text}" if hint else text
