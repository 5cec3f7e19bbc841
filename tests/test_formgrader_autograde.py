"""nbgrader's own autograde runs no student code in this course: the formgrader's Autograde button and plain
`nbgrader autograde` refuse with one line saying to run `make grade` (grader/gradebook/refuse_autograde.py).

A hostile submission whose answer cell writes a probe into the course directory and /dev/shm goes through:
- the formgrader's own handler (POST /formgrader/api/submission/A/S/autograde, what the button sends) on a real
  Jupyter server with nbgrader's formgrader, once with this course's nbgrader_config.py, once with nbgrader's
  defaults in the course and the hub's instructor config (deploy/hub/instructor) on JUPYTER_CONFIG_PATH;
- plain `nbgrader autograde` in the course directory.
None writes a probe, and the autograded notebook `make grade` left is still there. Without the refusal (nbgrader's
defaults everywhere) the same submission writes its probe: the attack is real, and the test can fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from grader.gradebook import roundtrip
from grader.gradebook.inject import autograde_config
from grader.gradebook.refuse_autograde import ALLOW, REFUSAL
from samples.make_samples import solution_answers
from tests.helpers import ROOT
from tests.servers import jupyter_server
from tests.graded_class import A, notebook_with, place

pytestmark = pytest.mark.timeout(900)
HUB_CONFIG = os.path.join(ROOT, "deploy", "hub", "instructor")
BIN = os.path.dirname(sys.executable)


def hostile(course_root: str, tag: str) -> tuple[dict, list[str]]:
    """A notebook whose first answer cell writes probes when nbgrader executes it (as whoever runs autograde)."""
    probes = [os.path.join(course_root, f"probe-{tag}"), f"/dev/shm/grader-probe-{tag}-{os.getpid()}"]
    code = "".join(f"open({p!r}, 'w').write('student code ran here')\n" for p in probes)
    answers = solution_answers()
    first = next(iter(answers))
    return notebook_with(dict(answers, **{first: code + answers[first]})), probes


@pytest.fixture
def course(tmp_path):
    """A generated course, bob's hostile submission collected, and the autograded notebook `make grade` wrote."""
    course = roundtrip.make_course(str(tmp_path / "course"), [A])
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    nb, probes = hostile(course.root, tmp_path.name)
    place(course, "bob", nb)
    autograded = os.path.join(course.root, "autograded", "bob", A)
    os.makedirs(autograded)
    with open(os.path.join(autograded, f"{A}.ipynb"), "w") as f:
        f.write("graded by make grade")
    yield course, probes, os.path.join(autograded, f"{A}.ipynb")
    for probe in probes:
        if os.path.exists(probe):
            os.remove(probe)


def nothing_ran(probes: list[str], autograded: str) -> None:
    assert [p for p in probes if os.path.exists(p)] == [], "student code ran outside the sandbox"
    with open(autograded) as f:
        assert f.read() == "graded by make grade", "the autograded notebook was lost"


def press_autograde(root: str, env: dict, tmp_path) -> dict:
    """A Jupyter server with nbgrader's formgrader in the course directory; the Autograde button's request."""
    with jupyter_server(root, env, str(tmp_path / "server.log")) as post:
        return post(f"/formgrader/api/submission/{A}/bob/autograde")


def server_env(tmp_path, config_path: str | None) -> dict:
    env = dict(
        os.environ,
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
        HOME=str(tmp_path),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_PATH=config_path or "",
    )
    env.pop("NBGRADER_DB_URL", None)
    return env


@pytest.mark.parametrize("config", ["course", "hub"])
def test_the_formgrader_autograde_button_runs_no_student_code(course, tmp_path, config):
    course, probes, autograded = course
    if config == "hub":  # nbgrader's defaults in the course; the hub's instructor config alone refuses
        with open(os.path.join(course.root, "nbgrader_config.py"), "w") as f:
            f.write("c = get_config()\nc.CourseDirectory.course_id = 'ddp-course'\n")
    reply = press_autograde(course.root, server_env(tmp_path, HUB_CONFIG if config == "hub" else None), tmp_path)
    assert reply["success"] is False, reply
    assert REFUSAL in reply.get("log", ""), reply
    nothing_ran(probes, autograded)


def test_plain_nbgrader_autograde_refuses_in_one_line(course):
    course, probes, autograded = course
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", A, "--force"],
        cwd=course.root,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", "")),
    )
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and REFUSAL in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    nothing_ran(probes, autograded)


def test_the_refusal_needs_an_explicit_flag_to_lift(course):
    """The flag an instructor types for notebooks they trust; the same command without it refused (above)."""
    course, probes, _ = course
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", A, "--force", ALLOW, "--ExecutePreprocessor.timeout=120"],
        cwd=course.root,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", "")),
    )
    assert REFUSAL not in proc.stderr, proc.stderr
    assert os.path.exists(probes[0]), proc.stderr[-2000:]


def test_make_grade_s_own_autograde_is_not_refused(course):
    """inject.py's autograde (what `make grade` writes the gradebook with) replaces both lists."""
    course, _, _ = course
    config = autograde_config(course, A, {})
    assert config.Autograde.exporter_class.__name__ == "NotebookExporter"
    assert all("Refuse" not in getattr(pp, "__name__", str(pp)) for pp in config.Autograde.autograde_preprocessors)


def test_without_the_refusal_the_submission_runs_as_the_instructor(course, tmp_path):
    """The control: nbgrader's defaults, the same submission, and its probe lands in the course directory."""
    course, probes, _ = course
    with open(os.path.join(course.root, "nbgrader_config.py"), "w") as f:
        f.write("c = get_config()\nc.CourseDirectory.course_id = 'ddp-course'\nc.ExecutePreprocessor.timeout = 120\n")
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", A, "--force"],
        cwd=course.root,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), HOME=str(tmp_path)),
    )
    assert os.path.exists(probes[0]), "the control did not run the student's code: this test shows nothing"
    shutil.rmtree(os.path.join(course.root, "autograded"), ignore_errors=True)
