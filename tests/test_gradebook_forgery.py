"""`make grade`: the parent is the only source of truth for graded/ (batch side).

Student code runs in the ranks as the same OS user as the grader, so it can
write graded/<assignment>/<student>.json, with the right sha256 and grader
digest, for itself or a classmate. That gains nothing: the parent read the
earlier results before any student code ran, takes new ones only from its
workers, puts back what was forged, and flags who forged. A submission that
changes the grader inside a rank is flagged too.
"""

import json
import os

import pytest
from nbgrader.api import Gradebook

from grader.code_digest import grader_digest
from grader.exercises import get_exercise
from grader.gradebook.batch import grade_assignment
from grader.gradebook.inject import gradebook_marks, gradebook_scores, write_results
from grader.gradebook.report import write_report
from samples.make_samples import solution_answers
from tests.graded_class import A, full_marks_checks, generated_course, notebook_with, place
from tests.test_instructor_workflow import TIMEOUT

FORGE = """
import hashlib as _hashlib, json as _json, os as _os

def _forge(student):
    submitted = _os.path.join({root!r}, "submitted", student, {a!r}, {a!r} + ".ipynb")
    payload = {{"student": student, "assignment": {a!r}, "grader": {digest!r}, "readable": True, "error": None,
               "sha256": _hashlib.sha256(open(submitted, "rb").read()).hexdigest(),
               "report": {{"exercise": {a!r}, "score": {max_score}, "max_score": {max_score},
                          "checks": _json.loads({checks!r})}}}}
    folder = _os.path.join({root!r}, "graded", {a!r})
    _os.makedirs(folder, exist_ok=True)
    with open(_os.path.join(folder, student + ".json"), "w") as f:
        _json.dump(payload, f)

for _student in ("mallet", "ben"):
    _forge(_student)
"""


def exercise_max() -> float:
    return get_exercise(A).max_score


def run(course):
    # unsandboxed (--no-sandbox): the forger's writes reach graded/ and the parent alone must undo them;
    # sandboxed, graded/ is not even there (tests/test_sandbox.py, tests/test_hostile_class.py)
    results = grade_assignment(course, A, jobs=1, timeout=TIMEOUT, progress=False, sandbox=False)
    write_results(course, A, results)
    return results


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return generated_course(str(tmp_path_factory.mktemp("forgery")))


@pytest.fixture(scope="module")
def graded(course):
    good = solution_answers()
    wrong = dict(
        good, train_one_epoch_answer=good["train_one_epoch_answer"].replace("    loader.sampler.set_epoch(epoch)\n", "")
    )
    place(course, "ben", notebook_with(wrong))
    first = run(course)  # ben alone: his result is an earlier run's when the forger runs
    ben_file = os.path.join(course.results_dir(A), "ben.json")
    with open(ben_file, "rb") as f:
        ben_bytes = f.read()
    ben_before = gradebook_scores(course, A)["ben"]

    exercise = get_exercise(A)
    full = json.dumps(full_marks_checks(A))
    forge = FORGE.format(root=course.root, a=A, digest=grader_digest(A), max_score=exercise.max_score, checks=full)
    place(course, "mallet", notebook_with(dict(wrong, pick_backend_answer=good["pick_backend_answer"] + forge)))
    # alice (graded before mallet) wraps dist.all_reduce inside the ranks: the grader notices it changed
    place(
        course,
        "alice",
        notebook_with(
            dict(
                good,
                setup_answer=good["setup_answer"]
                + (
                    "\nimport torch.distributed as _dist\n_real = _dist.all_reduce\n"
                    "def _fake_all_reduce(tensor, *args, **kwargs):\n    return _real(tensor, *args, **kwargs)\n"
                    "_dist.all_reduce = _fake_all_reduce\n"
                ),
            )
        ),
    )
    second = run(course)
    return first, second, ben_bytes, ben_before


def test_a_forged_result_file_gains_nothing(course, graded):
    first, second, ben_bytes, ben_before = graded
    scores = gradebook_scores(course, A)
    assert ben_before[0] < exercise_max()
    assert scores["ben"] == ben_before, "the classmate's grade changed"
    # mallet has ben's wrong answers: the grader's own run fails them, whatever the forged file said
    mallet = second["mallet"]["report"]
    assert scores["mallet"] == (mallet["score"], exercise_max()), "the forger gained something"
    assert {"train_calls_set_epoch", "training_matches_single_process"} <= {
        c["name"] for c in mallet["checks"] if not c["passed"]
    }
    with open(os.path.join(course.results_dir(A), "ben.json"), "rb") as f:
        assert f.read() == ben_bytes, "ben's stored result was not put back"
    with open(os.path.join(course.results_dir(A), "mallet.json")) as f:
        assert json.load(f)["report"]["score"] == second["mallet"]["report"]["score"]


def test_the_forger_alone_is_flagged_in_results_gradebook_and_report(course, graded):
    _, second, _, _ = graded
    flags = " ".join(second["mallet"]["flags"])
    assert "result file mallet.json was forged" in flags and "result file ben.json was forged" in flags, flags
    assert "only this submission was being graded then" in flags
    assert not any("forged" in f for s in ("ben", "alice") for f in second[s]["flags"])
    marks = gradebook_marks(course, A)
    assert marks["mallet"]["flagged"] and not marks["ben"]["flagged"]
    md, _ = write_report(course, A)
    with open(md) as f:
        head = f.read().split("submissions graded")[0]
    assert "**mallet**" in head and "ben.json was forged" in head and "**ben**" not in head


def test_changing_the_grader_in_a_rank_is_flagged(course, graded):
    _, second, _, _ = graded
    alice = second["alice"]
    tampered = [c for c in alice["report"]["checks"] if c.get("tampered")]
    assert tampered and all(c["points"] == 0 for c in tampered)
    assert any("changed the grader" in f for f in alice["flags"]), alice["flags"]
    assert gradebook_marks(course, A)["alice"]["flagged"]
    md, _ = write_report(course, A)
    with open(md) as f:
        assert "**alice**: " in f.read().split("submissions graded")[0]


def test_a_rerun_keeps_the_flags_and_regrades_nothing(course, graded):
    _, second, _, _ = graded
    folder = course.results_dir(A)
    stamps = {n: os.path.getmtime(os.path.join(folder, n)) for n in os.listdir(folder)}
    third = run(course)
    assert {n: os.path.getmtime(os.path.join(folder, n)) for n in os.listdir(folder)} == stamps
    assert third["mallet"]["flags"] == second["mallet"]["flags"]
    with Gradebook(course.db_url) as gb:
        assert len(gb.find_assignment(A).submissions) == 3
