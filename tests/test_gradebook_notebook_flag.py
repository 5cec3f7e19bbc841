"""The "✓ in the notebook, ✗ in the grader" flag sees what check() really writes.

check() shows its verdict as a display (display_data updated in place, with
text/plain and text/html), not as printed text. A submission notebook is
executed for real in a kernel (nbclient): pick_backend passes honestly;
pick_device is wrong, and its answer cell also makes the kernel's check()
show ✓. `make grade` flags pick_device only.
"""

import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from grader.gradebook import roundtrip
from grader.gradebook.batch import grade_assignment, in_notebook_results
from samples.make_samples import solution_answers
from tests.helpers import ROOT
from tests.graded_class import A, notebook_with, place
from tests.test_instructor_workflow import TIMEOUT

FAKE_PASS = """
import grader.notebook.display as _view
_add = _view.CheckView.add
def _add_passing(self, result):  # every check shows ✓ in this kernel
    result.passed, result.points, result.message = True, result.max_points, ""
    _add(self, result)
_view.CheckView.add = _add_passing
"""
KEPT = ("setup", "pick_backend_answer", "pick_backend_check", "pick_device_answer", "pick_device_check")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    good = solution_answers()
    answers = dict(
        good,
        pick_device_answer="def pick_device(local_rank):\n"
        "    return torch.device('meta')  # wrong everywhere\n" + FAKE_PASS,
    )

    def first_two_tasks(nb):
        nb["cells"] = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") in KEPT]

    nb = nbformat.reads(json.dumps(notebook_with(answers, first_two_tasks)), as_version=4)
    folder = str(tmp_path_factory.mktemp("run"))
    NotebookClient(
        nb, timeout=300, startup_timeout=120, kernel_name="python3", resources={"metadata": {"path": folder}}
    ).execute()
    return nbformat.writes(nb).encode("utf-8")


def check_outputs(data: bytes, task: str) -> list[dict]:
    cells = json.loads(data)["cells"]
    return next(c for c in cells if c["metadata"]["nbgrader"]["grade_id"] == f"{task}_check")["outputs"]


def test_check_writes_displays_and_both_tasks_show_a_pass(executed):
    for task in ("pick_backend", "pick_device"):
        outputs = check_outputs(executed, task)
        assert outputs and all(o["output_type"] == "display_data" for o in outputs), outputs
        shown = {kind: "".join(outputs[0]["data"][kind]) for kind in ("text/plain", "text/html")}
        assert all(f"✓ {task}" in text and "✗" not in text for text in shown.values()), shown
    assert in_notebook_results(executed) == {"pick_backend": True, "pick_device": True}


def test_make_grade_flags_the_task_the_notebook_shows_passing_but_fails(executed, tmp_path):
    course = roundtrip.make_course(str(tmp_path), [A])
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    place(course, "pia", executed.decode("utf-8"))
    result = grade_assignment(course, A, jobs=1, timeout=TIMEOUT, progress=False)["pia"]
    failed = {c["task"] for c in result["report"]["checks"] if not c["passed"]}
    assert "pick_device" in failed and "pick_backend" not in failed
    assert result["flags"] == ["the notebook shows ✓ for pick_device, but the grader's own run fails it"]
    with open(os.path.join(course.results_dir(A), "pia.json")) as f:
        assert json.load(f)["flags"] == result["flags"]  # kept for the report and the gradebook


def test_a_real_failure_shown_as_failure_is_not_flagged():
    # what check() leaves when a task fails in a student's own run: the ✗ display, then the error
    nb = notebook_with(solution_answers())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "pick_device_check")
    cell["outputs"] = [
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {
                "text/plain": "✗ pick_device: device_is_this_ranks (0/1)",
                "text/html": '<div class="grader-fail">✗ pick_device</div>',
            },
        },
        {"output_type": "error", "ename": "ChecksFailed", "evalue": "1 of 1 check failed", "traceback": []},
    ]
    assert in_notebook_results(json.dumps(nb).encode()) == {"pick_device": False}


def test_the_demo_has_a_flagged_student():
    # make demo's gwen: her saved notebook shows check()'s ✓ for make_dataloader, which her answer now fails
    path = os.path.join(ROOT, "samples", "submitted", "gwen", A, f"{A}.ipynb")
    with open(path, "rb") as f:
        assert in_notebook_results(f.read()) == {"make_dataloader": True}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "check",
            A,
            path,
            "--json",
            "--task",
            "make_dataloader",
            "--timeout",
            str(TIMEOUT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["score"] < sum(c["max_points"] for c in report["checks"]), report
