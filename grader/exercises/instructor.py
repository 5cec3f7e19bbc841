"""What only the instructor's install holds: each exercise's `hidden_*.py` modules.

Code students must never receive (hidden checks, references that are themselves a task's
answer) lives in modules named `hidden_*.py` in the exercise's package. `python -m grader
student-build` leaves them out and writes the marker `grader/STUDENT_BUILD`; without that
marker every exercise must hold its hidden modules (an exercise without any is an error,
never a silently smaller grade); grader.exercises.discover() finds them by their names.

`make grade` runs public checks in a sandbox where every hidden module is masked (sandbox.py) and
sets GRADER_HIDDEN_MASKED=1 there: get_exercise then imports none, and the exercise holds only its
public checks; hidden checks run in a second sandbox without the marker.
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = Path(__file__).resolve().parent.parent / "STUDENT_BUILD"
MASKED_ENV = "GRADER_HIDDEN_MASKED"  # set by the grading parent in a public-phase sandbox only


def is_student_build() -> bool:
    return MARKER.exists()


def hidden_masked() -> bool:
    """In a public-phase grading sandbox: the hidden modules are there as empty files only."""
    return os.environ.get(MASKED_ENV) == "1"


def loads_hidden() -> bool:
    """Whether loading an exercise imports its hidden modules: only in the instructor's install,
    outside a public-phase sandbox (grader.exercises.get_exercise)."""
    return not is_student_build() and not hidden_masked()
