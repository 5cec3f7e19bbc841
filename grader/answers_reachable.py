"""python -m grader check, on a machine that holds the course's answers: say so, once.

`check` runs the submission's code unsandboxed, as the user who runs it. Where the course checkout's `solutions/`
is readable (an instructor's laptop, a clone of the whole course), that code can read the answers: a submission
that runs the solution's answer cell gets full marks in every task (docs/security.md). The first `check` on such a
machine says so in one line, and that grades count only from `make grade` (sandboxed) or the student install,
which holds no answers; a marker in the user's cache folder keeps it to once (every time where none can be kept).
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.exercises.instructor import MARKER as STUDENT_BUILD

COURSE = Path(__file__).resolve().parent.parent  # the checkout that holds grader/ (site-packages when installed)
NOTICE = (
    "note: the course's answers are readable on this machine ({where}): the code `check` runs can read them, so a "
    "score here proves nothing. Grades count only from `make grade` (sandboxed) or the student install, which holds "
    "no answers. (Said once, at the first check here.)"
)


def readable_solutions(roots: list[Path]) -> list[Path]:
    """The solutions/ folders under these roots that this user can read."""
    found = []
    for root in dict.fromkeys(r.resolve() for r in roots):
        folder = root / "solutions"
        if folder.is_dir() and os.access(folder, os.R_OK | os.X_OK):
            found.append(folder)
    return found


def _said_marker() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "grader" / "said-answers-readable"


def notice_once(roots: list[Path] | None = None) -> str | None:
    """The line to print at this check, or None: no readable answers, a student install, or said already."""
    if STUDENT_BUILD.exists():
        return None
    found = readable_solutions([COURSE, Path.cwd()] if roots is None else roots)
    marker = _said_marker()
    if not found or marker.exists():
        return None
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{found[0]}\n")
    except OSError:  # nowhere to remember it: said at every check instead of never
        pass
    return NOTICE.format(where=", ".join(str(f) for f in found))
