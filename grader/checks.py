"""Checks: named, point-weighted tests of one task, run against a submission.

An exercise module declares its checks:

    EXERCISE = Exercise("02_ddp_basics", tasks=["pick_backend", ...])

    @EXERCISE.check("wrap_model", points=2)
    def wrap_model_syncs_parameters(g):
        params = g.run(_wrapped_params)          # one value per rank
        if params[0] != params[1]:
            raise CheckFailed("ranks hold different parameters: ...")

    def _wrapped_params(ctx, student):           # runs in every rank
        model = student.task("wrap_model")(...)

`g.run` is the one seam between checks and the student's code: it loads the
submission inside each rank and turns a crash, hang or missing task into a
CheckFailed whose message says what went wrong and where.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from grader.engine import RunResult, run_distributed
from grader.engine.plan import HardwarePlan, current_plan
from grader.submission import LoadReport, Submission


class CheckFailed(AssertionError):
    """A check's verdict: the message names the likely mistake."""


class CheckSkipped(Exception):
    """The check cannot run on this hardware (the message says why). It pays its
    points only when every other check of its task passes; then the report says so."""


class MissingTask(Exception):
    pass


class Student:
    """The student's definitions inside a rank."""

    def __init__(self, namespace, report: LoadReport):
        self._ns = namespace
        self.report = report

    def task(self, name: str):
        try:
            return getattr(self._ns, name)
        except AttributeError:
            hint = ("; while loading your answers: " + "; ".join(self.report.problems)) if self.report.problems else ""
            raise MissingTask(f"`{name}` is not defined in your answers{hint}") from None


def _call_with_student(ctx, submission: Submission, fn: Callable, args: tuple):
    namespace, report = submission.load()
    return fn(ctx, Student(namespace, report), *args)


def _load_only(ctx, submission: Submission) -> dict:
    return vars(submission.load()[1])


@dataclass
class Check:
    name: str
    task: str
    points: float
    fn: Callable
    hidden: bool = False
    world_size: int | None = None  # None: the grader's world size
    doc: str = ""


@dataclass
class CheckResult:
    name: str
    task: str
    passed: bool
    points: float
    max_points: float
    message: str
    hidden: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The plain-text verdict: a ✓/✗ line, the message under a ✗, a skip note under a ✓."""
        mark = "✓" if self.passed else "✗"
        out = [f"{mark} {self.task}: {self.name} ({self.points:g}/{self.max_points:g})"]
        if not self.passed:
            out += ["    " + line for line in self.message.splitlines()]
        return out + ["    " + note for note in self.notes if note.startswith("skipped")]


class Exercise:
    def __init__(self, exercise_id: str, tasks: list[str], title: str = ""):
        self.id = exercise_id
        self.tasks = list(tasks)
        self.title = title
        self.checks: list[Check] = []

    def check(self, task: str, points: float = 1, hidden: bool = False, world_size: int | None = None):
        if task not in self.tasks:
            raise ValueError(f"{task!r} is not a task of {self.id}")

        def register(fn):
            self.checks.append(Check(fn.__name__, task, points, fn, hidden, world_size, (fn.__doc__ or "").strip()))
            return fn

        return register

    def checks_for(self, task: str | None = None, hidden: bool | None = None) -> list[Check]:
        if task is not None and task not in self.tasks:
            raise ValueError(f"{task!r} is not a task of exercise {self.id}; its tasks are: {', '.join(self.tasks)}")
        return [c for c in self.checks
                if (task is None or c.task == task) and (hidden is None or c.hidden == hidden)]

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks)


class Grading:
    """What a check function gets: the submission and how to run it."""

    def __init__(self, submission: Submission, world_size: int = 2, timeout: float = 30.0,
                 backend: str | None = None):
        self.submission = submission
        self.world_size = world_size
        self.timeout = timeout
        self.backend = backend
        self.notes: list[str] = []
        self.load_report: LoadReport | None = None
        self.load_failure: str | None = None

    def plan(self, world_size: int | None = None) -> HardwarePlan:
        """The hardware plan a run of this check gets (backend, device per rank)."""
        return current_plan(world_size or self.world_size)

    def preflight(self) -> None:
        """Execute the answers once, alone, to learn what they define."""
        result = run_distributed(_load_only, 1, (self.submission,), timeout=self.timeout, init_group=False,
                                 backend="gloo", trusted=False)
        if result.ok:
            self.load_report = LoadReport(**result.ranks[0].value)
        else:
            self.load_failure = "loading your answers failed: " + result.failure().replace("rank 0 ", "it ", 1)

    def run_raw(self, fn: Callable, *args, world_size: int | None = None, timeout: float | None = None,
                init_group: bool = True) -> RunResult:
        result = run_distributed(_call_with_student, world_size or self.world_size, (self.submission, fn, args),
                                 timeout=timeout or self.timeout, backend=self.backend, init_group=init_group,
                                 trusted=False)
        self.notes += result.notes
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
    if errors and errors[0]["type"] == "MissingTask":
        return errors[0]["message"]
    if errors and errors[0]["type"] == "CheckFailed":
        return errors[0]["message"]
    if errors and errors[0]["type"] == "NotImplementedError":
        where = errors[0]["student_frames"][-1] if errors[0]["student_frames"] else ""
        return "not implemented yet: your code raises NotImplementedError" + (f" ({where})" if where else "")
    text = result.failure()
    if any(r.status == "hung" for r in result.ranks):
        text = "the run did not finish in time (a deadlock: ranks waiting in different collectives, or a " \
               "collective only some ranks call?)\n" + text
    return f"{hint}\n{text}" if hint else text


def run_checks(exercise: Exercise, submission: Submission, task: str | None = None, hidden: bool | None = None,
               world_size: int = 2, timeout: float = 30.0, backend: str | None = None,
               on_result: Callable[[CheckResult], None] | None = None) -> "Report":
    """Run the selected checks; a missing or crashing task fails its own checks only."""
    grading = Grading(submission, world_size, timeout, backend)
    grading.preflight()
    results = []
    for check in exercise.checks_for(task, hidden):
        results.append(_run_one(check, grading))
        if on_result:
            on_result(results[-1])
    return Report(exercise.id, results)


def _run_one(check: Check, grading: Grading) -> CheckResult:
    start = time.monotonic()
    grading.notes = []
    message, passed = "", False
    if grading.load_failure:
        message = grading.load_failure
    elif check.task not in grading.load_report.defined:
        message = f"`{check.task}` is not defined in your answers"
        if grading.load_report.problems:
            message += "; while loading them: " + "; ".join(grading.load_report.problems)
    else:
        try:
            ws = check.world_size or grading.world_size
            saved, grading.world_size = grading.world_size, ws
            try:
                check.fn(grading)
            finally:
                grading.world_size = saved
            passed = True
        except CheckFailed as exc:
            message = str(exc)
        except Exception as exc:  # a bug in a check must not pass or crash the batch
            message = f"the check itself failed ({type(exc).__name__}: {exc}); please tell the instructor"
    return CheckResult(check.name, check.task, passed, check.points if passed else 0, check.points, message,
                       check.hidden, list(grading.notes), round(time.monotonic() - start, 3))


@dataclass
class Report:
    exercise: str
    checks: list[CheckResult]

    @property
    def score(self) -> float:
        return sum(c.points for c in self.checks)

    @property
    def max_score(self) -> float:
        return sum(c.max_points for c in self.checks)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict:
        keys = ("name", "task", "passed", "points", "max_points", "message", "hidden", "notes")
        return {"exercise": self.exercise, "score": self.score, "max_score": self.max_score,
                "checks": [{k: v for k, v in asdict(c).items() if k in keys} for c in self.checks]}

    def lines(self) -> list[str]:
        return [line for c in self.checks for line in c.lines()]
