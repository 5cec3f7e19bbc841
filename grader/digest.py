"""One digest of the code that grades an assignment.

It changes whenever that code changes: the engine, the checks framework, the
runner, reading submissions, the tolerances, and the exercise's own package.
Cached verdicts (the progress view's, `make grade`'s results) carry it and are
stale as soon as it differs.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os

_GRADER = os.path.dirname(os.path.abspath(__file__))
FRAMEWORK = ("checks.py", "grading.py", "runner.py", "submission.py", "tolerances.py", "cells.py")


def _python_files(folder: str) -> list[str]:
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".py")]


def grader_digest(assignment: str) -> str:
    from grader.exercises import MODULES

    package = os.path.dirname(importlib.util.find_spec(MODULES[assignment]).origin)
    sources = [os.path.join(_GRADER, n) for n in FRAMEWORK] + _python_files(os.path.join(_GRADER, "engine"))
    sources += _python_files(package)
    h = hashlib.sha256()
    for path in sources:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, _GRADER).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]
