"""The instructor's loop, end to end, on nbgrader's real commands and gradebook.

One throwaway course: two students go through fetch and submit; the rest of
the class lands in submitted/ as nbgrader's collect leaves it, among them
submissions that try to cheat or break the batch. Grading is parallel, its
scores equal grading one by one, and nobody gains anything by cheating.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from nbgrader.api import Gradebook

from grader.exercises import get_exercise
from grader.gradebook import roundtrip
from grader.gradebook.batch import grade_assignment
from grader.gradebook.inject import gradebook_marks, gradebook_scores, task_scores, write_results
from grader.gradebook.report import write_report
from samples.make_samples import solution_answers
from tests.graded_class import A, notebook_with, place

TIMEOUT = 10.0
MAX = get_exercise(A).max_score


def cell(nb, grade_id):
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def one_by_one(path: str) -> float:
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "check", A, path, "--json", "--timeout", str(TIMEOUT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return json.loads(proc.stdout)["score"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("course"))
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    good = solution_answers()
    wrong = dict(
        good, train_one_epoch_answer=good["train_one_epoch_answer"].replace("    loader.sampler.set_epoch(epoch)\n", "")
    )
    # two students go through nbgrader's fetch and submit
    for student, answers in (("ada", good), ("ben", wrong)):
        path = roundtrip.fetch(course, A, student)
        with open(path, "w") as f:
            json.dump(notebook_with(answers), f)
        roundtrip.submit(course, A, student)
    roundtrip.collect(course, A)
    ada = os.path.join(root, "submitted", "ada", A, f"{A}.ipynb")
    gradebook = os.path.join(root, "gradebook.db")

    # the class's troublemakers, as collected
    def claims_all_passed(nb):
        for c in nb["cells"]:
            if c["metadata"].get("nbgrader", {}).get("grade_id", "").endswith("_check"):
                c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "✓ all good\n"}]

    patcher = dict(
        wrong,
        pick_backend_answer=good["pick_backend_answer"]
        + (
            "\nimport grader.checks, grader.tolerances, grader.notebook\n"
            "grader.checks.CheckFailed = type('Never', (Exception,), {})\n"
            "grader.tolerances.assert_close = lambda *a, **k: None\n"
            "grader.checks.Report.passed = property(lambda self: True)\n"
            "import os\nos.environ['NBGRADER_EXECUTION'] = ''\n"
        ),
    )
    place(course, "mallory", notebook_with(patcher, claims_all_passed))

    def delete_and_edit_checks(nb):
        nb["cells"].remove(cell(nb, "MiniDDP_check"))
        cell(nb, "train_one_epoch_check")["source"] = "pass  # nothing to see"

    place(course, "trent", notebook_with(wrong, delete_and_edit_checks))
    vandal = dict(
        wrong,
        cleanup_answer=good["cleanup_answer"]
        + (
            f"\nimport sqlite3\n"
            f"for _p in [{ada!r}]:\n"
            f"    open(_p, 'w').write('overwritten by vandal')\n"
            f"_db = sqlite3.connect({gradebook!r})\n"
            f"_db.execute('CREATE TABLE IF NOT EXISTS pwned (x)')\n"
            f"_db.commit()\n"
        ),
    )
    place(course, "victor", notebook_with(vandal))
    place(course, "oscar", notebook_with(dict(good, setup_answer="import os\nos._exit(1)\n" + good["setup_answer"])))
    place(
        course,
        "heidi",
        notebook_with(
            dict(
                good,
                save_checkpoint_answer=good["save_checkpoint_answer"].replace(
                    "\n    dist.barrier()",
                    "\n        dist.barrier()  # only rank 0: the ranks' collectives no longer match",
                ),
            )
        ),
    )
    place(
        course,
        "carl",
        notebook_with(
            dict(
                good,
                wrap_model_answer=good["wrap_model_answer"].replace(
                    "    model = model.to(device)\n", "    raise RuntimeError('crash on every rank')\n"
                ),
            )
        ),
    )
    place(course, "judy", '{"cells": [ this is not json')
    return course


@pytest.fixture(scope="module")
def graded(course):
    originals = {s: open(p, "rb").read() for s, p in course.submitted(A).items()}
    # unsandboxed (--no-sandbox): victor's writes then reach the files, and the parent's own guard must put them
    # back and flag him; sandboxed, they are refused outright (tests/test_sandbox.py, tests/test_hostile_class.py)
    results = grade_assignment(course, A, jobs=2, timeout=TIMEOUT, progress=False, sandbox=False)
    write_results(course, A, results)
    return results, originals


def test_every_submission_is_graded_and_the_batch_survives_bad_ones(course, graded):
    results, _ = graded
    scores = gradebook_scores(course, A)
    assert set(scores) == {"ada", "ben", "mallory", "trent", "victor", "oscar", "heidi", "carl", "judy"}
    assert scores["ada"] == (MAX, MAX)
    assert results["judy"]["readable"] is False and "not a readable notebook" in results["judy"]["error"]
    assert scores["judy"][0] == 0
    assert 0 < scores["heidi"][0] < MAX and 0 < scores["carl"][0] < MAX  # graded as far as they can be
    heidi = {c["name"]: c["message"] for c in results["heidi"]["report"]["checks"] if not c["passed"]}
    assert any("did not finish in time" in m and "waiting in barrier" in m for m in heidi.values()), heidi
    carl = {c["name"]: c["message"] for c in results["carl"]["report"]["checks"] if not c["passed"]}
    assert any("crash on every rank" in m for m in carl.values())
    oscar = results["oscar"]["report"]["checks"]
    failed = [c["message"] for c in oscar if not c["passed"] and not c["hidden"]]
    said = [m for m in failed if "exited with code 1" in m]  # once; later checks of the same run point to it
    assert said and all(m in said or "which failed: fix that first" in m for m in failed), failed
    assert all(c["message"] for c in oscar if not c["passed"])  # hidden ones: the grader's fixed words


def test_scores_equal_grading_one_by_one(course, graded):
    scores = gradebook_scores(course, A)
    for student in ("ada", "ben", "heidi"):
        path = os.path.join(course.root, "submitted", student, A, f"{A}.ipynb")
        assert scores[student][0] == one_by_one(path), student


def test_cheating_gains_nothing_and_is_flagged(course, graded):
    results, originals = graded
    scores = gradebook_scores(course, A)
    # mallory, trent and victor have ben's answers: deleting or editing check cells, faking ✓ outputs,
    # writing into others' files change nothing; patching the grader in the ranks costs its checks
    assert scores["ben"] == scores["trent"] == scores["victor"]
    assert scores["mallory"][0] < scores["ben"][0]
    assert any("the notebook shows ✓" in f for f in results["mallory"]["flags"])
    assert any("changed the grader" in f for f in results["mallory"]["flags"])
    marks = gradebook_marks(course, A)  # the formgrader's "Flagged?" column
    assert marks["mallory"]["flagged"] and marks["victor"]["flagged"] and not marks["ada"]["flagged"]
    # victor overwrote ada's submission and wrote into the gradebook: both restored and flagged
    for student, data in originals.items():
        with open(os.path.join(course.root, "submitted", student, A, f"{A}.ipynb"), "rb") as f:
            assert f.read() == data, f"{student}'s submission was modified"
    assert any("gradebook was changed" in f for f in results["victor"]["flags"])
    with Gradebook(course.db_url) as gb:
        tables = [
            r[0]
            for r in gb.db.execute(
                __import__("sqlalchemy").text("SELECT name FROM sqlite_master WHERE type='table'")
            ).fetchall()
        ]
    assert "pwned" not in tables


def test_feedback_shows_verdicts_and_messages_but_no_hidden_test_code(course, graded):
    roundtrip.feedback(course, A)
    with open(os.path.join(course.root, "feedback", "ben", A, f"{A}.html")) as f:
        html = f.read()
    assert "✗ train_one_epoch: train_calls_set_epoch" in html and "set_epoch(epoch)" in html
    assert "✓ wrap_model" in html
    assert "hidden check of train_one_epoch" in html
    assert "HIDDEN TESTS" not in html and "hidden=True" not in html
    # the ✓/✗ lines only: not the task's points that nbgrader reads as partial credit (Out[ ]: 4)
    assert "Out[" not in html and "jp-OutputArea-executeResult" not in html
    with Gradebook(course.db_url) as gb:  # ... which nbgrader still has, task by task
        for task, points in task_scores(graded[0]["ben"]).items():
            assert gb.find_grade(f"{task}_check", A, A, "ben").score == points, task


def test_grades_export_and_class_report(course, graded):
    csv = roundtrip.export(course)
    with open(csv) as f:
        rows = f.read().splitlines()
    assert rows[0].startswith("assignment,") and sum(",ada," in r for r in rows) == 1
    md, png = write_report(course, A)
    with open(md) as f:
        report = f.read()
    assert "train_calls_set_epoch" in report and os.path.getsize(png) > 10_000
    flagged = report.split("submissions graded")[0]  # flagged students first, with the reason
    assert "**mallory**: the notebook shows ✓" in flagged and "**victor**" in flagged and "**ada**" not in flagged
    full = sum(
        1
        for r in graded[0].values()
        if r["report"] and all(c["passed"] for c in r["report"]["checks"] if c["task"] == "wrap_model")
    )
    points = sum(c.points for c in get_exercise(A).checks if c.task == "wrap_model")
    assert f"| wrap_model ({points:g} points) | {full}/" in report


def test_regrading_is_idempotent(course, graded):
    before = gradebook_scores(course, A)
    stamps = {
        p: os.path.getmtime(p)
        for p in (os.path.join(course.results_dir(A), f) for f in os.listdir(course.results_dir(A)))
    }
    results = grade_assignment(course, A, jobs=2, timeout=TIMEOUT, progress=False, sandbox=False)
    write_results(course, A, results)
    assert gradebook_scores(course, A) == before
    assert all(os.path.getmtime(p) == t for p, t in stamps.items()), "cached results were regraded"
    with Gradebook(course.db_url) as gb:
        assert len(gb.find_assignment(A).submissions) == len(before)


def test_a_run_killed_halfway_resumes_without_losing_or_duplicating(tmp_path):
    course = roundtrip.make_course(str(tmp_path), [A])
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    good = solution_answers()
    for student in ("s1", "s2", "s3", "s4"):
        place(course, student, notebook_with(good))
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "grader", "grade", A, "--root", course.root, "--jobs", "1", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (
        os.path.isdir(course.results_dir(A)) and any(f.endswith(".json") for f in os.listdir(course.results_dir(A)))
    ):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    done_before = {f for f in os.listdir(course.results_dir(A)) if f.endswith(".json")}
    assert 1 <= len(done_before) < 4
    finished = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert gradebook_scores(course, A) == {s: (MAX, MAX) for s in ("s1", "s2", "s3", "s4")}
    with Gradebook(course.db_url) as gb:
        assert len(gb.find_assignment(A).submissions) == 4
