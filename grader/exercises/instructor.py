"""What only the instructor's install holds: each exercise's `hidden_*.py` modules.

Code students must never receive (hidden checks, references that are themselves a task's
answer) lives in modules named `hidden_*.py` in the exercise's package. `python -m grader
student-build` leaves them out and writes the marker `grader/STUDENT_BUILD`; without that
marker every hidden module an exercise names must be there (a missing one is an error,
never a silently smaller grade).

`make grade` runs public checks in a sandbox where every hidden module is masked (sandbox.py) and
sets GRADER_HIDDEN_MASKED=1 there: load_hidden then imports none, and the exercise holds only its
public checks; hidden checks run in a second sandbox without the marker.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from grader.checks import Exercise

MARKER = Path(__file__).resolve().parent.parent / "STUDENT_BUILD"
MASKED_ENV = "GRADER_HIDDEN_MASKED"  # set by the grading parent in a public-phase sandbox only


def is_student_build() -> bool:
    return MARKER.exists()


def hidden_masked() -> bool:
    """In a public-phase grading sandbox: the hidden modules are there as empty files only."""
    return os.environ.get(MASKED_ENV) == "1"


def load_hidden(exercise: Exercise, package: str, modules: list[str]) -> None:
    """Import the exercise's hidden modules (unless this is a student build or a public-phase
    sandbox), then order its checks as the notebook calls them: task by task, each task's public
    checks, then its hidden ones."""
    if not is_student_build() and not hidden_masked():
        for name in modules:
            try:
                importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise ImportError(f"{package}.{name} is missing, and this is not a student build (no {MARKER}): "
                                  "the instructor's grader needs every hidden module") from exc
    exercise.checks.sort(key=lambda c: (exercise.tasks.index(c.task), c.hidden))
