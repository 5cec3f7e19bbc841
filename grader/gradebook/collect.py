"""python -m grader collect ASSIGNMENT: `nbgrader collect` from the default exchange that refuses, with one line
each, a submission in another student's name, postdated or backdated (grader/gradebook/vetted_collect.py says how)."""

from __future__ import annotations

import os
import subprocess
import sys

VETTED = "grader.gradebook.vetted_collect.VettedCollect"  # imported by nbgrader, not here: this module stays light


def _collect(args) -> int:
    """`nbgrader collect` in the course directory, with VettedCollect as its exchange's collect."""
    cmd = [sys.executable, "-m", "nbgrader", "collect", args.assignment, f"--ExchangeFactory.collect={VETTED}"]
    cmd += ["--update"] * args.update + ["--before-duedate"] * args.before_duedate
    return subprocess.run(cmd, cwd=os.path.abspath(args.root)).returncode


def register(sub) -> None:
    collect = sub.add_parser(
        "collect",
        help="nbgrader collect from the default exchange, refusing submissions "
        "in another student's name, postdated or backdated",
    )
    collect.add_argument("assignment")
    collect.add_argument("--root", default=".", help="the course directory (default: the current one)")
    collect.add_argument("--update", action="store_true", help="replace older collected submissions")
    collect.add_argument("--before-duedate", action="store_true", help="the newest submission before the due date")
    collect.set_defaults(func=_collect)
