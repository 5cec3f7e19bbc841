"""Checks: named, point-weighted tests of one task, and their results.

An exercise module declares its checks:

    EXERCISE = Exercise("02_ddp_basics", tasks=["pick_backend", ...])

    @EXERCISE.check("wrap_model", points=2)
    def wrap_model_syncs_parameters(g):
        params = g.run(_wrapped_params)          # one value per rank
        if params[0] != params[1]:
            raise CheckFailed("ranks hold different parameters: ...")

    def _wrapped_params(ctx, student):           # runs in every rank
        model = student.task("wrap_model")(...)

`g` is a grader.grading.Grading: `g.run` is the one seam between checks and
the student's code. grader.runner.run_checks runs the checks (the CLI, the
notebook, `make grade` and the progress view all use it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable


class CheckFailed(AssertionError):
    """A check's verdict: the message names the likely mistake."""


class CheckSkipped(Exception):
    """The check cannot run on this hardware (the message says why). It pays its
    points only when every other check of its task passes; then the report says so."""


@dataclass
class Check:
    name: str
    task: str
    points: float
    fn: Callable
    hidden: bool = False
    world_size: int | None = None  # None: the grader's world size
    feedback: str = ""  # a hidden check's own words under its ✗ (fixed text: nothing of the student's run)
    depends_on: tuple[str, ...] = ()  # earlier checks whose failure in the same run explains this one's


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
    plan: str = ""  # the hardware plan its runs used, e.g. "2 ranks, gloo on CPU (no GPU visible)"
    skipped: bool = False  # could not run on this hardware (credited only beside a fully passing task)
    tampered: bool = False  # the submission changed the grader while this check ran
    hung: bool = False  # a run of this check did not finish in time
    outputs: list[list[str]] = field(default_factory=list)  # what each rank printed, per run (if kept)
    unrunnable: bool = False  # the machine could not run it (its GPU or process group): 0 points, regrade

    def lines(self) -> list[str]:
        """The plain-text verdict: a ✓/✗ line, the message under a ✗, a skip note under a ✓."""
        mark = "✓" if self.passed else "✗"
        out = [f"{mark} {self.task}: {self.name} ({self.points:g}/{self.max_points:g})"]
        if not self.passed:
            out += ["    " + line for line in self.message.splitlines()]
        return out + ["    " + note for note in self.notes if note.startswith("skipped")]


class Exercise:
    """One exercise: its tasks, its checks, and how the tools treat it.

    side_by_side: the checks of one task may run at once in the notebook (their ranks
    mostly wait); False for checks that are CPU-heavy themselves (real torchrun agents).
    judged_by_bench: `make bench` holds its warm check time to about a second.
    typical_mistakes: [(a line of the solution's answers, what a student typically writes instead), ...], at most
    one per task, appended by the exercise's hidden modules since they quote the answer (none in a student build);
    `make selfcheck` grades the solution so changed, each alone, and expects the line's task to score less than its
    full marks (grader/instructor/selfcheck.py).
    """

    def __init__(self, exercise_id: str, tasks: list[str], side_by_side: bool = True, judged_by_bench: bool = True):
        self.id = exercise_id
        self.tasks = list(tasks)
        self.side_by_side = side_by_side
        self.judged_by_bench = judged_by_bench
        self.typical_mistakes: list[tuple[str, str]] = []
        self.checks: list[Check] = []
        self.declared_runs: dict[tuple[str, bool], list] = {}  # (task, hidden) -> [((fn, args), world size or None)]

    @property
    def notebook(self) -> str:
        """The solution notebook, relative to the course root (nbgrader's source/<id>/<id>.ipynb)."""
        return f"solutions/{self.id}/{self.id}.ipynb"

    def check(
        self,
        task: str,
        points: float = 1,
        hidden: bool = False,
        world_size: int | None = None,
        feedback: str = "",
        depends_on: tuple[str, ...] = (),
    ):
        """Register a check. feedback: what a failed hidden check says besides its kind of failure and the
        lines of its own message that hold nothing of the student's run (grader.feedback_filter).
        depends_on: checks registered before this one whose expectation this one's rests on (the order of
        samples, the model's parameters, a collective): when one of them failed in the same run, this one's
        failure points to it instead of diagnosing again (grader.runner)."""
        if task not in self.tasks:
            raise ValueError(f"{task!r} is not a task of {self.id}")
        unknown = set(depends_on) - {c.name for c in self.checks}
        if unknown:
            raise ValueError(f"depends_on names no earlier check of {self.id}: {', '.join(sorted(unknown))}")

        def register(fn):
            self.checks.append(Check(fn.__name__, task, points, fn, hidden, world_size, feedback, tuple(depends_on)))
            return fn

        return register

    def declare_runs(self, task: str, parts: tuple, hidden: bool = False, world_size: int | None = None) -> None:
        """Declare the runs `task`'s checks ask for with g.run (parts: ((fn, args), ...), args a tuple of hashable
        values; hidden ones at `world_size`), so that the engine may make them in one launch with other declared
        runs (grader/shared_runs.py: it changes no verdict). A check still asks for each with g.run(fn, *args)."""
        if task not in self.tasks:
            raise ValueError(f"{task!r} is not a task of {self.id}")
        declared = self.declared_runs.setdefault((task, hidden), [])
        for part in parts:
            if (part, world_size) not in declared:
                declared.append((part, world_size))

    def checks_for(self, task: str | None = None, hidden: bool | None = None) -> list[Check]:
        if task is not None and task not in self.tasks:
            raise ValueError(f"{task!r} is not a task of exercise {self.id}; its tasks are: {', '.join(self.tasks)}")
        return [c for c in self.checks if (task is None or c.task == task) and (hidden is None or c.hidden == hidden)]

    def points_of(self, task: str, hidden: bool | None = None) -> float:
        return sum(c.points for c in self.checks_for(task, hidden))

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks)


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

    @property
    def tampered(self) -> bool:
        return any(c.tampered for c in self.checks)

    def to_json(self) -> dict:
        keys = (
            "name",
            "task",
            "passed",
            "points",
            "max_points",
            "message",
            "hidden",
            "notes",
            "plan",
            "skipped",
            "tampered",
            "unrunnable",
        )
        return {
            "exercise": self.exercise,
            "score": self.score,
            "max_score": self.max_score,
            "checks": [{k: v for k, v in asdict(c).items() if k in keys} for c in self.checks],
        }

    def lines(self) -> list[str]:
        return [line for c in self.checks for line in c.lines()]


__all__ = ["CheckFailed", "CheckSkipped", "Check", "CheckResult", "Exercise", "Report"]
