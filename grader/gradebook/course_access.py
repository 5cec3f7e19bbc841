"""Is the course directory open to other accounts of this machine? One line saying so, for `make lab` and `make grade`.

The course directory holds the answers (solutions/), the gradebook, students' submissions and graded/<assignment>/
*.json, and the grader beside it holds the hidden checks (grader/exercises/*/hidden_*.py). On a machine with other
accounts (students' own servers on a one-machine hub, a shared lab machine), a folder that those accounts can enter
lets each of them read all that. The hub refuses to start unless the course is the instructor's, mode 0700
(deploy/hub/jupyterhub_config.py); here the instructor is told in one line, and nothing is changed.

    python -m grader.gradebook.course_access COURSE   (make lab: prints the line, exits 0)
"""

from __future__ import annotations

import os
import stat
import sys

OTHERS = stat.S_IRWXG | stat.S_IRWXO  # any right for the folder's group or for everyone


def reachable_by_others(path: str) -> bool:
    """Whether accounts other than the owner (its group, or everyone) may enter `path`: the folder gives them a
    right, and every folder above it lets them pass."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & OTHERS:
            return False
        folder = os.path.dirname(path)
        while True:
            if not os.stat(folder).st_mode & (stat.S_IXGRP | stat.S_IXOTH):
                return False
            if folder == os.path.dirname(folder):
                return True
            folder = os.path.dirname(folder)
    except OSError:
        return False


def warning(course_root: str) -> str | None:
    """The one line for a course, or a grader with its hidden checks, that other accounts may enter; None if
    neither."""
    import grader

    course, package = (os.path.realpath(p) for p in (course_root, os.path.dirname(grader.__file__)))
    readable = []
    if reachable_by_others(course):
        readable.append((course, "solutions/, the gradebook, the submissions and graded/"))
    if package.startswith(course + os.sep) and not readable and reachable_by_others(package):
        readable.append((package, "the hidden checks (exercises/*/hidden_*.py)"))  # a grader elsewhere: its own install
    if not readable:
        return None
    shown = "; ".join(f"{p} ({stat.S_IMODE(os.stat(p).st_mode):04o}): {what}" for p, what in readable)
    return (
        f"grader: other accounts on this machine can read {shown}; make it yours alone: "
        f"chmod 700 {' '.join(p for p, _ in readable)}"
    )


if __name__ == "__main__":
    line = warning(sys.argv[1] if len(sys.argv) > 1 else ".")
    if line:
        print(line, file=sys.stderr)
