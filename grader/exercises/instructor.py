"""What only the instructor's install holds: each exercise's `hidden_*.py` modules.

Code students must never receive (hidden checks, references that are themselves a task's
answer) lives in modules named `hidden_*.py` in the exercise's package. `python -m grader
student-build` leaves them out and writes the marker `grader/STUDENT_BUILD`; without that
marker every hidden module an exercise names must be there (a missing one is an error,
never a silently smaller grade).
"""
from __future__ import annotations

import importlib
from pathlib import Path

from grader.checks import Exercise

MARKER = Path(__file__).resolve().parent.parent / "STUDENT_BUILD"


def is_student_build() -> bool:
    return MARKER.exists()


def load_hidden(exercise: Exercise, package: str, modules: list[str]) -> None:
    """Import the exercise's hidden modules (unless this is a student build), then order its
    checks as the notebook calls them: task by task, each task's public checks, then its hidden ones."""
    if not is_student_build():
        for name in modules:
            try:
                importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise ImportError(f"{package}.{name} is missing, and this is not a student build (no {MARKER}): "
                                  "the instructor's grader needs every hidden module") from exc
    exercise.checks.sort(key=lambda c: (exercise.tasks.index(c.task), c.hidden))
