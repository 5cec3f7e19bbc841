"""nbgrader's Validate runs no submission on the instructor's side (grader/gradebook/refuse_validate.py).

A notebook whose only cell writes a probe stands for a hostile submission. Placed where students' work lands on
the instructor's side (submitted/, autograded/, feedback/, the exchange's inbound/), it is refused in one line,
before its kernel starts, through:
- `nbgrader validate` in the course directory (the course's nbgrader_config.py);
- the Validate button's handler (POST /assignments/validate, nbgrader's validate_assignment server extension) on a
  real Jupyter server in the course directory, once with this course's nbgrader_config.py, once with nbgrader's
  defaults in the course and the hub's instructor config (deploy/hub/instructor) on JUPYTER_CONFIG_PATH.
The same notebook in a student's fetched copy (`ddp-course/<assignment>/`, where `make lab`'s Assignment List
fetches) or in the release (exercises/) is validated and writes its probe: students keep the button, and the
refusal is what stops the probe elsewhere (the test can fail).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from grader.gradebook import roundtrip
from grader.gradebook.refuse_validate import refusal
from tests.graded_class import A
from tests.helpers import ROOT
from tests.servers import jupyter_server

pytestmark = pytest.mark.timeout(600)
BIN = os.path.dirname(sys.executable)
HUB_CONFIG = os.path.join(ROOT, "deploy", "hub", "instructor")
REFUSED_BY = "nbgrader's validate would run"
# where students' work lands on the instructor's side, relative to the course (exchange: roundtrip's, in the course)
STUDENTS_WORK = [
    f"submitted/bob/{A}",
    f"autograded/bob/{A}",
    f"feedback/bob/{A}",
    f"exchange/ddp-course/inbound/bob+{A}+2026-11-29 12:00:00.000000 UTC+abc",
    f"submitted/bob/{A}/ddp-course/{A}",  # a fetched copy's shape inside a submission
]
ALLOWED = [f"ddp-course/{A}", f"exercises/{A}"]


def probe_notebook(folder: str, probe: str) -> str:
    """A notebook at folder/A.ipynb whose one cell writes `probe` when a kernel runs it."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{A}.ipynb")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"open({probe!r}, 'w').write('ran')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture
def course(tmp_path):
    """A course with the probe notebook in each place; yields (course root, place -> probe file)."""
    course = roundtrip.make_course(str(tmp_path / "course"), [A])
    probes = {}
    for i, where in enumerate(STUDENTS_WORK + ALLOWED):
        probes[where] = str(tmp_path / f"probe-{i}")
        probe_notebook(os.path.join(course.root, where), probes[where])
    return course.root, probes


def env_for(tmp_path, config_path: str | None) -> dict:
    env = dict(
        os.environ,
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
        HOME=str(tmp_path),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_PATH=config_path or "",
        NBGRADER_EXCHANGE=roundtrip.exchange_root(str(tmp_path / "course")),
    )
    env.pop("NBGRADER_DB_URL", None)
    return env


def validate(root: str, where: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", os.path.join(where, f"{A}.ipynb")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_nbgrader_validate_refuses_students_work_in_one_line_and_runs_the_rest(course, tmp_path):
    root, probes = course
    env = env_for(tmp_path, None)
    for where in STUDENTS_WORK:
        proc = validate(root, where, env)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out
        errors = [line for line in out.splitlines() if "ERROR" in line]
        assert len(errors) == 1 and REFUSED_BY in errors[0] and "make grade" in errors[0], out
        assert "Traceback" not in out, out
        assert not os.path.exists(probes[where]), f"nbgrader validate ran {where}"
    for where in ALLOWED:
        proc = validate(root, where, env)
        assert proc.returncode == 0 and REFUSED_BY not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert os.path.exists(probes[where]), f"{where} was not validated: the control shows nothing"


@pytest.mark.parametrize("config", ["course", "hub"])
def test_the_validate_button_refuses_a_submission_and_keeps_a_fetched_copy(course, tmp_path, config):
    root, probes = course
    if config == "hub":  # nbgrader's defaults in the course; the hub's instructor config alone refuses
        with open(os.path.join(root, "nbgrader_config.py"), "w") as f:
            f.write("c = get_config()\nc.CourseDirectory.course_id = 'ddp-course'\n")
    env = env_for(tmp_path, HUB_CONFIG if config == "hub" else None)
    with jupyter_server(root, env, str(tmp_path / "server.log")) as post:
        for where in (f"submitted/bob/{A}", f"autograded/bob/{A}"):
            reply = post("/assignments/validate", f"path={where}/{A}.ipynb".encode())
            assert reply["success"] is False, reply
            assert reply["value"].strip().splitlines()[-1].count(REFUSED_BY) == 1, reply
            assert not os.path.exists(probes[where]), f"the Validate button ran {where}"
        reply = post("/assignments/validate", f"path=ddp-course/{A}/{A}.ipynb".encode())
        assert reply["success"] is True, reply
        assert os.path.exists(probes[f"ddp-course/{A}"]), "a student's fetched copy was not validated"


def test_a_link_is_judged_by_where_it_leads(course, tmp_path):
    """A fetched copy's folder that is a link into submitted/ is refused; one outside the course's folders is not
    refused for its name alone when its target is a fetched copy."""
    root, _ = course
    config = roundtrip.Course(root).config
    linked = os.path.join(root, "ddp-course", "linked")
    os.symlink(os.path.join(root, "submitted", "bob", A), linked)
    assert refusal(os.path.join(linked, f"{A}.ipynb"), config)
    moved = str(tmp_path / "elsewhere" / "ddp-course" / A)
    shutil.copytree(os.path.join(root, "ddp-course", A), moved)
    assert refusal(os.path.join(moved, f"{A}.ipynb"), config) is None
    assert refusal(os.path.join(root, "lessons", "x.ipynb"), config)  # anything else of the course: refused
