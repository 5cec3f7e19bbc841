"""python -m grader student-build OUT_DIR: the grader a student's server may hold.

OUT_DIR becomes an installable folder (`pip install OUT_DIR`):

    pyproject.toml          the course's, renamed ddp-course-grader-student, with the marker as package data
    grader/                 the engine and the public checks: every hidden module grader.exercises.discover()
                            finds left out (a hidden_* file anywhere else fails the build: leaks())
    grader/STUDENT_BUILD    the marker: the checks load no hidden module (grader/exercises/instructor.py)
    course/exercises/       the released notebooks (nbgrader's release, no solution)
    course/lessons/         the lessons

Never in it: solutions/, hidden checks, instructor-only references (hidden_*.py),
samples/ and the tests. The build refuses a non-empty OUT_DIR that is not an
earlier student build (it deletes nothing else), and refuses to run from a student build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from grader import cells
from grader.exercises import discover
from grader.exercises.instructor import MARKER, is_student_build

PACKAGE = Path(__file__).resolve().parents[1]  # grader/, the package a student build copies
ROOT = PACKAGE.parent
STAMP = ".student-build"  # in OUT_DIR: this folder is a student build, safe to replace
DIST_NAME = "ddp-course-grader-student"
COURSE_FOLDERS = ("exercises", "lessons")
SOLUTION_MARK = re.compile(r"^\s*#+\s*BEGIN (SOLUTION|HIDDEN TESTS)\s*$", re.M)


class BuildError(Exception):
    pass


def _hidden_files() -> set[str]:
    """The instructor-only modules, as grader.exercises.discover() finds them (one rule for all)."""
    return {os.path.realpath(f) for found in discover().values() for f in found.hidden_files}


def _left_out(folder: str, names: list[str]) -> set[str]:
    hidden = _hidden_files()
    return {
        n
        for n in names
        if os.path.realpath(os.path.join(folder, n)) in hidden
        or n in ("__pycache__", ".ipynb_checkpoints")
        or n.endswith((".pyc", ".pyo"))
        or n == MARKER.name
    }


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / STAMP).is_file():
            raise BuildError(
                f"{out} is not empty and is not an earlier student build (no {STAMP}): "
                "choose an empty or new folder; nothing was changed"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _pyproject(source: str) -> str:
    """The course's pyproject.toml, as the student distribution: its dependencies, no extras."""
    text = re.sub(r'(?m)^name = ".*"$', f'name = "{DIST_NAME}"', source, count=1)
    text = re.sub(r"(?ms)^\[project\.optional-dependencies\]\n.*?(?=^\[)", "", text)
    text = re.sub(r"(?ms)^\[tool\.pytest\.ini_options\]\n.*?(?=^\[|\Z)", "", text)
    text = re.sub(r'(?m)^readme = ".*"\n', "", text)
    text = re.sub(r"(?ms)^\[tool\.setuptools\.package-data\]\n.*?(?=^\[|\Z)", "", text)
    # the marker, and the grader's catalogs (grader/i18n.py: its messages in the student's language)
    return text.rstrip() + (
        '\n\n[tool.setuptools.package-data]\ngrader = ["STUDENT_BUILD", "locale/*/LC_MESSAGES/*.po"]\n'
    )


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _text(path: Path) -> str:
    """A file's text; a notebook's cell sources, one after the other."""
    if path.suffix != ".ipynb":
        return path.read_text(errors="replace")
    return "\n".join(cells.source(c) for c in cells.read_cells(str(path)))


def leaks(folder: Path) -> list[str]:
    """What in `folder` a student must not have: hidden modules, solution or hidden-test regions."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.name.startswith("hidden_"):
            found.append(f"{path}: an instructor-only module")
        elif path.suffix in (".py", ".ipynb", ".md", ".txt") and path.is_file():
            if SOLUTION_MARK.search(_text(path)):
                found.append(f"{path}: a solution or hidden-test region")
    return found


def build(out_dir: str | Path) -> Path:
    if is_student_build():
        raise BuildError("this grader is itself a student build: build from the course repository")
    if not (ROOT / "pyproject.toml").is_file():
        raise BuildError(f"no pyproject.toml in {ROOT}: build from the course repository (an editable install)")
    out = Path(out_dir).resolve()
    if out == PACKAGE or PACKAGE in out.parents:
        raise BuildError(f"{out} is inside the grader package: choose a folder outside {PACKAGE}")
    _prepare(out)
    shutil.copytree(PACKAGE, out / "grader", ignore=_left_out)
    (out / "grader" / MARKER.name).write_text(
        "A student build of the course's grader: no hidden checks, no instructor-only references.\n"
        f"Built by `python -m grader student-build` from commit {_commit()}.\n"
    )
    (out / "pyproject.toml").write_text(_pyproject((ROOT / "pyproject.toml").read_text()))
    for name in COURSE_FOLDERS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, out / "course" / name, ignore=_left_out)
    found = leaks(out)
    if found:
        shutil.rmtree(out)
        raise BuildError("the student build would hold what students must not see:\n  " + "\n  ".join(found))
    (out / STAMP).write_text("made by python -m grader student-build; it may replace this folder\n")
    return out


def _run(args) -> int:
    try:
        out = build(args.out_dir)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"student build in {out}: install it on a student image with `pip install {out}`")
    return 0


def register(sub) -> None:
    parser = sub.add_parser(
        "student-build", help="an installable grader for students' servers: no hidden checks, no answers"
    )
    parser.add_argument("out_dir", help="an empty or new folder, or an earlier student build (replaced)")
    parser.set_defaults(func=_run)
