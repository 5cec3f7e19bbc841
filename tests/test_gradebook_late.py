"""Late submissions keep nbgrader's penalty under `make grade`.

A course with nbgrader's late-submission plugin configured (SubMarks, nbgrader's
documented example: one point per hour late) and a due date: a late, partly
wrong submission gets the same score and the same penalty from `make grade`
as from plain `nbgrader autograde` (which runs check() in a kernel); an
on-time one gets no penalty. The feedback of plain autograde shows no `Out[ ]: 4`.
"""

import os
import subprocess
import sys

import pytest

from grader.exercises import get_exercise
from grader.gradebook import roundtrip
from grader.gradebook.inject import gradebook_marks
from grader.gradebook.refuse_autograde import ALLOW  # our own samples: nbgrader's autograde may run them
from samples.make_samples import solution_answers
from tests.graded_class import A, notebook_with, place

SUBMARKS = '''
from nbgrader.plugins import BasePlugin


class SubMarks(BasePlugin):
    def late_submission_penalty(self, student_id, score, total_seconds_late):
        """One point per hour late."""
        return round(total_seconds_late / 3600, 0)
'''
LATE_CONFIG = """
import sys
sys.path.insert(0, here)  # submarks.py, next to this file
c.AssignLatePenalties.plugin_class = "submarks.SubMarks"
"""
DUE = "2026-11-29 09:00:00 UTC"  # place() stamps submissions 2026-11-29 12:00:00 UTC: three hours late


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = roundtrip.make_course(str(tmp_path_factory.mktemp("late")), [A])
    with open(os.path.join(course.root, "submarks.py"), "w") as f:
        f.write(SUBMARKS)
    with open(os.path.join(course.root, "nbgrader_config.py"), "a") as f:
        f.write(LATE_CONFIG)
    roundtrip.nbgrader(["generate_assignment", A, "--force"], course.root, course.root)
    roundtrip.nbgrader(["db", "assignment", "add", A, f"--duedate={DUE}"], course.root, course.root)
    good = solution_answers()
    wrong = dict(
        good, train_one_epoch_answer=good["train_one_epoch_answer"].replace("    loader.sampler.set_epoch(epoch)\n", "")
    )
    place(course, "lara", notebook_with(wrong))
    otto = place(course, "otto", notebook_with(wrong))
    with open(os.path.join(os.path.dirname(otto), "timestamp.txt"), "w") as f:
        f.write("2026-11-29 08:00:00.000000 UTC")
    return course


def test_make_grade_keeps_nbgraders_late_penalty(course):
    roundtrip.nbgrader(["autograde", A, "--student", "lara", "--force", ALLOW], course.root, course.root, timeout=900)
    plain = gradebook_marks(course, A)["lara"]
    assert plain["late_penalty"] == 3 and 0 < plain["score"] < get_exercise(A).max_score, plain
    # feedback after plain autograde (the formgrader's button) shows the ✓/✗ lines, not check()'s points
    roundtrip.nbgrader(["generate_feedback", A, "--student", "lara", "--force"], course.root, course.root)
    with open(os.path.join(course.root, "feedback", "lara", A, f"{A}.html")) as f:
        html = f.read()
    assert "✓ wrap_model" in html and "✗ train_one_epoch" in html and "Out[" not in html

    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", A, "--root", course.root, "--quiet", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = gradebook_marks(course, A)
    assert (ours["lara"]["score"], ours["lara"]["late_penalty"]) == (plain["score"], plain["late_penalty"])
    assert ours["otto"]["score"] == plain["score"] and not ours["otto"]["late_penalty"]
    assert "late: -3 (nbgrader's late penalty)" in next(l for l in proc.stdout.splitlines() if l.startswith("lara"))
    csv = roundtrip.export(course)
    with open(csv) as f:
        rows = [r.split(",") for r in f.read().splitlines()]
    header, lara = rows[0], next(r for r in rows if "lara" in r)
    assert float(lara[header.index("late_submission_penalty")]) == 3


def test_the_plugins_penalty_is_held_between_zero_and_the_score():
    """Our clamp of the plugin's public result, as nbgrader's autograde clamps it: never more than the score,
    never a bonus; on time (or a plugin that says None) means no penalty."""
    from nbgrader.plugins import BasePlugin, LateSubmissionPlugin

    from grader.gradebook.inject import late_penalty

    class Fixed(BasePlugin):
        def __init__(self, penalty):
            super().__init__()
            self.penalty = penalty

        def late_submission_penalty(self, student_id, score, total_seconds_late):
            return self.penalty

    assert late_penalty(Fixed(3), "lara", 10, 3600) == 3
    assert late_penalty(Fixed(25), "lara", 10, 3600) == 10
    assert late_penalty(Fixed(-2), "lara", 10, 3600) == 0
    assert late_penalty(Fixed(None), "lara", 10, 3600) is None
    assert late_penalty(Fixed(3), "otto", 10, 0) is None
    assert late_penalty(LateSubmissionPlugin(penalty_method="zero"), "lara", 7.5, 60) == 7.5
    assert late_penalty(LateSubmissionPlugin(), "lara", 7.5, 60) is None
