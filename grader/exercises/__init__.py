"""The exercises: one package per exercise, found by convention (no list of modules anywhere).

What an exercise package `grader/exercises/<name>/` must contain:

    __init__.py     declares the exercise: `EXERCISE = Exercise("05_my_topic", tasks=[...], ...)`
                    (grader.checks.Exercise; the tasks in the notebook's order). It imports no
                    check module: discovery does, in the order below.
    checks_*.py     public checks: each registers its checks with `@EXERCISE.check(task, points=...)`
                    (imported as `from grader.exercises.<name> import EXERCISE`)
    hidden_*.py     hidden checks and instructor-only references: left out of the student build,
                    masked in a public-phase grading sandbox (grader/exercises/instructor.py).
                    An instructor's install (no STUDENT_BUILD marker) must hold at least one per
                    exercise, so a grader copied without them fails loudly instead of grading less.
    anything else   helpers the checks import (reference.py, ...): never imported by discovery.

Order of the checks: the modules are imported public first (checks_*.py by
name), then hidden (hidden_*.py by name); each module's checks in the order it defines them.
The checks are then ordered as the notebook calls them: task by task (EXERCISE.tasks), each
task's public checks, then its hidden ones.

discover() is the one discovery: get_exercise(), the forkserver's preload (public modules
only), the student build (hidden files), the digest and `python -m grader list` use it.
Shared by the exercises' checks: collectives.py (every collective of the student's code, at the dispatcher),
dispatch_mode.py (the one home of TorchDispatchMode), dist_patch.py (torch.distributed replaced around a call and
put back), fences.py (waiting for peers with a bound), happens_before.py (order evidence: did rank A wait for
rank B?), instructor.py (hidden modules masked in a public-phase sandbox).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass
from functools import lru_cache

from grader.checks import Exercise
from grader.exercises import instructor

PUBLIC = "checks_"  # checks_<topic>.py: one convention (a bare checks.py is refused, not ignored)
HIDDEN = "hidden_"


class UnknownExercise(KeyError):
    pass


@dataclass(frozen=True)
class ExercisePackage:
    """One exercise package as found on disk, before its checks are imported."""

    id: str
    package: str  # grader.exercises.<name>
    folder: str
    public: tuple[str, ...]  # module names, in import order
    hidden: tuple[str, ...]

    @property
    def hidden_files(self) -> list[str]:
        return [os.path.join(self.folder, m.rpartition(".")[2] + ".py") for m in self.hidden]


def _is_public(name: str) -> bool:
    return name.startswith(PUBLIC)


def _modules(folder: str, package: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names = sorted(m.name for m in pkgutil.iter_modules([folder]) if not m.ispkg)
    if "checks" in names:
        raise ImportError(
            f"{package}.checks: name it checks_<topic>.py, as every exercise does (discovery imports checks_*.py only)"
        )
    public = [n for n in names if _is_public(n)]
    hidden = [n for n in names if n.startswith(HIDDEN)]
    return tuple(f"{package}.{n}" for n in public), tuple(f"{package}.{n}" for n in hidden)


@lru_cache(maxsize=1)
def discover() -> dict[str, ExercisePackage]:
    """Every exercise package under grader/exercises, by exercise id, in id order. Importing a
    package runs only its __init__.py (the declaration); an error there is raised as it is."""
    found: dict[str, ExercisePackage] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        package = f"{__name__}.{info.name}"
        declared = getattr(importlib.import_module(package), "EXERCISE", None)
        if not isinstance(declared, Exercise):
            raise TypeError(f"{package} declares no EXERCISE = Exercise(...) in its __init__.py")
        if declared.id in found:
            raise ValueError(f"exercise id {declared.id!r} is declared by {found[declared.id].package} and {package}")
        folder = os.path.join(__path__[0], info.name)
        found[declared.id] = ExercisePackage(declared.id, package, folder, *_modules(folder, package))
    return dict(sorted(found.items()))


def exercise_ids() -> list[str]:
    return list(discover())


def find(exercise_id: str) -> ExercisePackage:
    found = discover()
    if exercise_id not in found:
        raise UnknownExercise(f"unknown exercise {exercise_id!r}; the exercises are: {', '.join(found)}")
    return found[exercise_id]


def _load(found: ExercisePackage) -> Exercise:
    exercise = importlib.import_module(found.package).EXERCISE
    for module in found.public:
        importlib.import_module(module)
    if instructor.loads_hidden():
        if not found.hidden:
            raise ImportError(
                f"{found.package} has no hidden_*.py module, and this is not a student build "
                f"(no {instructor.MARKER}): the instructor's grader needs its hidden checks"
            )
        for module in found.hidden:
            importlib.import_module(module)
    exercise.checks.sort(key=lambda c: (exercise.tasks.index(c.task), c.hidden))
    _preload_in_ranks(found.public)
    return exercise


def _preload_in_ranks(modules: tuple[str, ...]) -> None:
    """The forkserver imports the public check modules once (never a hidden one: a public rank
    must not have them); a hidden check's rank imports its module when it unpickles the check."""
    from grader.engine.processes import preload

    preload(modules)


_loaded: dict[str, Exercise] = {}


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with its checks, in the notebook's order. A check module that fails to
    import raises here, with its traceback, before anything is graded."""
    if exercise_id not in _loaded:
        _loaded[exercise_id] = _load(find(exercise_id))
    return _loaded[exercise_id]
