"""The one seam between a check and the student's code (CS336's adapters, for ranks).

A check's parent-side code calls `g.run(fn, *args)`; every rank then loads the
submission, runs `fn(ctx, student, *args)` and returns one value per rank.
`student.task(name)` is the student's definition. A crash, a hang, a missing
task or a submission that tampers with the grader becomes a CheckFailed whose
message says what went wrong and where.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import tempfile
import threading
from typing import Callable

from grader import tolerances
from grader.checks import CheckFailed
from grader.engine import RunResult, divergence, flight_recorder, run_distributed, stacks
from grader.engine.results import last_output_heading
from grader.engine.plan import HardwarePlan, current_plan, plan_for
from grader.i18n import N_, _
from grader.shared_runs import shared_answer
from grader.submission import LoadReport, Submission


class MissingTask(Exception):
    pass


class MachineFailed(Exception):
    """The machine could not run the check (a GPU or process group that could not be set up, before any student
    code ran): it pays nothing, says so, and the submission is listed for regrading."""


class RunCheckFailed(CheckFailed):
    """A run of the student's code failed (crash, hang, early exit, missing task, tampering): raised by
    Grading.run. kind names the failure for a hidden check's fixed message; hint is the check's own."""

    def __init__(self, message: str, kind: str, hint: str = "", hang: tuple[str, str] | None = None):
        super().__init__(message)
        self.kind, self.hint = kind, hint
        self.hang = hang  # a public run that hung or aborted: (its ranks' details, the message without them)


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
    flight_recorder.serve(ctx.workdir, ctx.rank)  # if the run fails: this rank's collectives, for the message
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

    def __init__(
        self,
        submission: Submission,
        world_size: int = 2,
        timeout: float = 30.0,
        parent_lock: threading.Lock | None = None,
        keep_output: bool = False,
        runs: Callable[..., RunResult] = run_distributed,
    ):
        self.submission = submission
        self.launcher = runs  # run_distributed, or the runner's SharedRuns (one launch for the checks asking the same)
        self.world_size = world_size
        self.timeout = timeout
        self.notes: list[str] = []
        self.plans: list[str] = []  # the plan of each run, described
        self.outputs: list[list[str]] = []  # what each rank printed, per run (keep_output)
        self.tampered = False
        self.hung = False
        self.hang: tuple[str, str] | None = None  # the runner's: a public run that hung or aborted (RunCheckFailed)
        self.hidden = False  # a hidden check: its runs' failure() shows no text of the ranks (runner sets it)
        self.rank_texts: list[str] = []  # every string the ranks sent (values, errors, output): never shown in hidden
        self.load_report: LoadReport | None = None
        self.load_failure: str | None = None
        self._parent_lock = parent_lock  # checks side by side: only one runs parent-side code at a time
        self._keep_output = keep_output
        self._backends: set[str] = set()  # of this check's runs, from the parent's plans (never a rank's word)
        self.tasks: tuple[str, ...] = ()  # the tasks graded in this run (runner sets): their runs may share launches
        self.task = ""  # the check's own task (runner sets)
        self.declared_runs: dict = {}  # the exercise's declared runs (Exercise.declare_runs; runner sets)
        self.share_launches = True  # False: every run of this check its own (the runner's confirmation of a failure)
        self.read_shared_launch = False  # a run's values came from a launch shared with other runs (shared_runs.py)
        self.machine_failure = ""  # a run the machine could not set up (runner: "could not run on this machine")

    def plan(self, world_size: int | None = None) -> HardwarePlan:
        """The hardware plan a run of this check gets (backend, device per rank)."""
        return current_plan(world_size or self.world_size)

    @property
    def backend(self) -> str:
        """The backend whose tolerances this check's comparisons get: nccl once any of its runs used nccl
        (results that went through an nccl run, e.g. a checkpoint saved there and loaded elsewhere, carry its
        reordered sums), else the plan's for this check's world size."""
        if self._backends:
            return "nccl" if "nccl" in self._backends else "gloo"
        return self.plan().backend

    def tolerance(self, dtype) -> tuple[float, float]:
        """(rtol, atol) for dtype under this check's backend."""
        return tolerances.tolerance(dtype, self.backend)

    def close(self, actual, expected) -> bool:
        """Whether actual is within this check's tolerance of expected (to choose a hint; verdicts use assert_close)."""
        return tolerances.allclose(actual, expected, self.backend)

    def assert_close(
        self, actual, expected, what: str, likely: str = "", tol: tuple[float, float] | None = None
    ) -> None:
        """tolerances.assert_close under this check's backend (see backend)."""
        tolerances.assert_close(actual, expected, what, likely, backend=self.backend, tol=tol)

    def preflight(self) -> None:
        """Execute the answers once, alone, to learn what they define."""
        result = run_distributed(
            _load_only,
            1,
            (self.submission,),
            timeout=self.timeout,
            init_group=False,
            trusted=False,
            plan=plan_for(1, 0),
        )  # no GPU: no CUDA context just to load
        self.rank_texts += rank_texts(result)
        value = result.ranks[0].value if result.ok else None
        if result.ok and isinstance(value, dict) and set(value) == {"defined", "problems", "unreached"}:
            self.load_report = LoadReport(**value)
        elif result.ok:
            self.load_failure = _("loading your answers sent back something that is not the grader's report")
        else:
            self.tampered = result.tampered
            self.load_failure = _(
                "loading your answers failed: {failure}", failure=result.failure().replace("rank 0 ", "it ", 1)
            )

    def run_raw(
        self,
        fn: Callable,
        *args,
        world_size: int | None = None,
        timeout: float | None = None,
        init_group: bool = True,
        share_failure: bool = False,
    ) -> RunResult:
        """share_failure: the runner's SharedRuns gives a failure of this run to the other checks asking for it
        too (shared_runs.py); for a run the checks replace by their own when it fails."""
        shared = {"share_failure": True} if share_failure and getattr(self.launcher, "shares_failures", False) else {}
        if self._parent_lock:
            self._parent_lock.release()  # other checks' parent-side code may run while our ranks work
        try:
            result = self.launcher(
                _call_with_student,
                world_size or self.world_size,
                (self.submission, fn, args),
                timeout=timeout or self.timeout,
                init_group=init_group,
                trusted=False,
                **shared,
            )
        finally:
            if self._parent_lock:
                self._parent_lock.acquire()
        result.hidden = self.hidden
        self._backends.add(result.plan.backend)
        self.rank_texts += rank_texts(result)
        self.notes += result.notes
        if result.plan.describe() not in self.plans:
            self.plans.append(result.plan.describe())
        if self._keep_output:
            self.outputs.append([r.output for r in result.ranks])
        self.tampered |= result.tampered
        self.hung |= result.hung
        if result.unavailable:  # never a verdict: whatever the check would make of it
            self.machine_failure = self.machine_failure or result.failure()
            raise MachineFailed(self.machine_failure)
        return result

    @contextlib.contextmanager
    def folder(self, shared_as: str | None = None):
        """A path for runs to pass files through (a checkpoint one run saves and the next loads). shared_as: the
        same path for every check of the submission asking under that name, so that a first run they all make
        (the same function, arguments and folder) is launched once (shared_runs.py); a check whose later runs
        read what other checks' runs may have changed there sets read_shared_launch (a failure is then confirmed
        by the check's own runs). Otherwise, and for a confirmation, a folder of this check's own, removed
        afterwards."""
        if shared_as and self.share_launches and hasattr(self.launcher, "folder"):
            yield self.launcher.folder(shared_as)
            return
        root = tempfile.mkdtemp(prefix="grader-files-")
        try:
            yield os.path.join(root, "data")
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def run(
        self,
        fn: Callable,
        *args,
        world_size: int | None = None,
        timeout: float | None = None,
        init_group: bool = True,
        hint: str = "",
    ) -> list:
        """Run fn(ctx, student, *args) on every rank; a failure becomes a CheckFailed. A run the exercise declared
        (Exercise.declare_runs) may be answered from a launch shared with other runs (shared_runs.py)."""
        if self.share_launches and world_size in (None, self.world_size) and timeout is None and init_group:
            shared = shared_answer(self, (fn, args))
            if shared is not None:
                return shared
        result = self.run_raw(fn, *args, world_size=world_size, timeout=timeout, init_group=init_group)
        if not result.ok:
            shown = self._keep_output  # the ranks' output is shown beside the message (the notebook)
            hang = (
                (result.failure(), describe_failure(result, hint, stacks_shown=False, output_shown=shown))
                if (result.hung or _aborted(result)) and not result.hidden
                else None
            )
            raise RunCheckFailed(describe_failure(result, hint, output_shown=shown), failure_kind(result), hint, hang)
        return [r.value for r in result.ranks]


def rank_texts(result: RunResult) -> list[str]:
    """Every string a run's ranks sent or wrote: in values (any depth), errors, output, stacks."""
    found: list[str] = []

    def walk(value, depth=0):
        if isinstance(value, (str, bytes)):
            found.append(value if isinstance(value, str) else value.decode("utf-8", "replace"))
        elif depth < 20 and isinstance(value, dict):
            for k, v in value.items():
                walk(k, depth + 1)
                walk(v, depth + 1)
        elif depth < 20 and isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                walk(v, depth + 1)

    for r in result.ranks:
        walk([r.value, r.error, r.output, r.stack, stacks.frame_strings(r.stack), r.calls])
    return found


def failure_kind(result: RunResult) -> str:
    """tampered | missing | not_implemented | rank_verdict | crashed | hung | exited: what a failed run was,
    as the parent sees it (a rank's claim of an error type only picks among these fixed sentences)."""
    errors = [r.error for r in result.ranks if r.status == "error" and r.error]
    if result.tampered:
        return "tampered"
    if errors and errors[0]["type"] == "MissingTask":
        return "missing"
    if errors and errors[0]["type"] == "NotImplementedError":
        return "not_implemented"
    if errors and errors[0]["type"] == "CheckFailed":
        return "rank_verdict"
    if errors:
        return "crashed"
    return "hung" if result.hung else "exited"


def describe_failure(result: RunResult, hint: str = "", stacks_shown: bool = True, output_shown: bool = False) -> str:
    """What a failed run says to the student. stacks_shown=False: a hang or an abort without each rank's
    details (another check of the task, answered by the same run, shows them). output_shown: the ranks' output
    is shown beside the message, so an aborted rank's last output (gloo's C++ text) is not repeated in it."""
    errors = [r.error for r in result.ranks if r.status == "error" and r.error]
    if result.hidden:  # a hidden test: the kind of failure, never what a rank raised, printed or claimed
        text = _(HIDDEN_FAILURE[failure_kind(result)])
        if result.hung:
            text += "\n" + result.failure(kind_only=True)
        return f"{hint}\n{text}" if hint else text
    tampered = [e for e in errors if e["type"] == "Tampered"]
    if tampered:
        return tampered[0]["message"]
    if errors and errors[0]["type"] in ("MissingTask", "CheckFailed"):
        return errors[0]["message"]
    if errors and errors[0]["type"] == "NotImplementedError":
        where = errors[0]["student_frames"][-1] if errors[0]["student_frames"] else ""
        return _(HIDDEN_FAILURE["not_implemented"]) + (f" ({where})" if where else "")
    text = _without_abort_output(result) if output_shown else result.failure()
    steps = _explained(result) if result.hung or _aborted(result) else []
    if result.hung:
        text = "\n".join([hang_heading(result), *steps]) + ("\n\n" + text if stacks_shown else "")
    elif steps:
        text = "\n".join(steps) + ("\n\n" + text if stacks_shown else "")
    elif not stacks_shown:
        text = text.split("\n", 1)[0]
    return f"{hint}\n{text}" if hint else text


def _without_abort_output(result: RunResult) -> str:
    """result.failure(), an aborted rank's last output (gloo's C++ text) left to the output shown beside it."""
    parts = []
    for r in result.ranks:
        if r.status in ("ok", "stopped"):
            continue
        text = r.describe()
        heading = "\n" + last_output_heading() + "\n"
        if r.status == "exited" and r.exitcode == -signal.SIGABRT and heading in text:
            text = (
                text.split(heading, 1)[0]
                + "\n"
                + _("(gloo's own words, in C++, are rank {rank}'s output below, folded)", rank=r.rank)
            )
        parts.append(text)
    return "\n\n".join(parts) or "no failure"


def _explained(result: RunResult) -> list[str]:
    """divergence.explain: a record it cannot read (the ranks' own text) only makes the message say less."""
    try:
        return divergence.explain(result)
    except Exception:
        return []


def _aborted(result: RunResult) -> bool:
    return any(r.status == "exited" and r.exitcode == -signal.SIGABRT for r in result.ranks)


def hang_heading(result: RunResult) -> str:
    """Why the run hung: a rank busy in the student's own code, or ranks waiting for each other."""
    busy = [r for r in result.ranks if r.busy_in_student_code()]
    if busy and len(busy) == len(result.ranks):
        return _(
            "the run did not finish in time: every rank is busy in your code (a loop or a wait that never "
            "ends?), not in a collective"
        )
    if busy:
        where = "; ".join(
            _(
                "rank {rank} is busy in your code at {line}",
                rank=r.rank,
                line=stacks.student_frame_line(stacks.busy_frame(r.stack)),
            )
            for r in busy
        )
        return _("the run did not finish in time: {where}; the others wait for it", where=where)
    return _(
        "the run did not finish in time (a deadlock: ranks waiting in different collectives, or a "
        "collective only some ranks call?)"
    )


HIDDEN_FAILURE = {  # a hidden test's failed run, in words the parent chooses (English; _() when shown)
    "tampered": N_("your code changed the grader or torch in a hidden test, so it scores 0"),
    "missing": N_("your answers do not define what this hidden test calls"),
    "not_implemented": N_("not implemented yet: your code raises NotImplementedError"),
    "crashed": N_(
        "your code raised an exception in a hidden test (hidden tests do not show its text; "
        "the public checks of this task run the same code and show theirs)"
    ),
    "rank_verdict": N_("your code failed a hidden test (what its ranks report is not shown)"),
    "hung": N_("your code hung in a hidden test"),
    "exited": N_("a process of your code exited before returning a result in a hidden test"),
}
