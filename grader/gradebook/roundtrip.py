"""The whole nbgrader loop, driven through nbgrader's own commands.

generate_assignment (solutions -> exercises) -> release_assignment -> each
student fetch_assignment, answers, submit -> collect -> `python -m grader
grade` -> generate_feedback -> export (CSV). Used by `make demo` and by the
end-to-end test, on a throwaway copy of the course with its own exchange and
SQLite gradebook.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeError, ExchangeFactory
from traitlets.config import Config

from grader.gradebook.course import Course

# One OS user plays every student here, so the course's vetted collect (each file owned by the account of the
# student it names: vetted_collect.py) would refuse them all; the demo's own samples go through nbgrader's plain one.
PLAIN_COLLECT = "--ExchangeFactory.collect=nbgrader.exchange.default.collect.ExchangeCollect"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COURSE_ID = "ddp-course"


class StepFailed(RuntimeError):
    pass


def make_course(root: str, assignments: list[str]) -> Course:
    """A fresh course directory: our nbgrader config and the source notebooks."""
    os.makedirs(root, exist_ok=True)
    shutil.copy(os.path.join(REPO, "nbgrader_config.py"), root)
    for assignment in assignments:
        target = os.path.join(root, "solutions", assignment)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(os.path.join(REPO, "solutions", assignment), target)
    os.makedirs(exchange_root(root), mode=0o777, exist_ok=True)
    return Course(root)


def exchange_root(root: str) -> str:
    return os.path.join(root, "exchange")


def nbgrader(args: list[str], cwd: str, root: str, timeout: float = 300) -> str:
    env = dict(
        os.environ,
        NBGRADER_EXCHANGE=exchange_root(root),
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    env.pop("NBGRADER_DB_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise StepFailed(f"nbgrader {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def release(course: Course, assignment: str) -> None:
    nbgrader(["generate_assignment", assignment, "--force"], course.root, course.root)
    nbgrader(["release_assignment", assignment, "--force"], course.root, course.root)


def student_home(course: Course, student: str) -> str:
    return os.path.join(course.root, "students", student)


def _as_student(action: str, course: Course, assignment: str, student: str) -> None:
    """nbgrader's own exchange classes, as `nbgrader fetch_assignment|submit` runs them
    for a student, in-process (a subprocess per student costs seconds of imports)."""
    config = Config()
    config.Exchange.root = exchange_root(course.root)
    config.Exchange.assignment_dir = student_home(course, student)
    config.Exchange.path_includes_course = False
    config.CourseDirectory.course_id = COURSE_ID
    config.CourseDirectory.assignment_id = assignment
    config.CourseDirectory.student_id = student  # one OS user plays every student here
    factory = ExchangeFactory(config=config)
    exchange = factory.FetchAssignment if action == "fetch" else factory.Submit
    app = exchange(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config), config=config)
    try:
        app.start()
    except ExchangeError as exc:
        raise StepFailed(f"{action} of {assignment} for {student} failed: {exc}") from exc


def fetch(course: Course, assignment: str, student: str) -> str:
    """The student fetches the assignment; returns the path of their notebook."""
    os.makedirs(student_home(course, student), exist_ok=True)
    _as_student("fetch", course, assignment, student)
    return os.path.join(student_home(course, student), assignment, f"{assignment}.ipynb")


def submit(course: Course, assignment: str, student: str) -> None:
    _as_student("submit", course, assignment, student)


def collect(course: Course, assignment: str) -> None:
    nbgrader(["collect", assignment, "--update", PLAIN_COLLECT], course.root, course.root)


def feedback(course: Course, assignment: str) -> str:
    nbgrader(["generate_feedback", assignment, "--force"], course.root, course.root)
    return os.path.join(course.root, "feedback")


def export(course: Course) -> str:
    path = os.path.join(course.root, "grades.csv")
    nbgrader(["export", f"--to={path}"], course.root, course.root)
    return path
