"""`make demo`, the course's main job, end to end: the sample class (samples/make_samples.py) is released, fetched,
submitted, collected, graded in real multi-process runs into nbgrader's gradebook, given feedback, exported and
reported. Each sample student fails exactly the tasks of the mistakes put into their notebook, ada gets full marks,
and only gwen (whose notebook still shows an old ✓) is flagged."""

import csv
import re

import pytest

from grader.instructor import demo

pytestmark = pytest.mark.timeout(900)  # the class is graded once, in the first test

A = "02_ddp_basics"
FAILED_TASKS = {  # the tasks each sample's mistakes break (samples/make_samples.py)
    "ada": set(),
    "ben": {"train_one_epoch", "train_with_accumulation"},  # no set_epoch; the loss sum not all-reduced (both tasks)
    "chloe": {"make_dataloader", "save_checkpoint"},
    "dev": {"MiniDDP", "cleanup"},
    "eve": {"wrap_model", "load_checkpoint"},
    "finn": {"MiniDDP", "train_one_epoch"},  # left unfinished
    "gwen": {"make_dataloader"},
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "course"
    assert demo.main(A, root=str(root)) == 0
    return root


def test_each_sample_fails_exactly_the_tasks_of_its_mistakes(ran):
    for student, expected in FAILED_TASKS.items():
        html = (ran / "feedback" / student / A / f"{A}.html").read_text(encoding="utf-8")
        failed = set(re.findall(r"✗ (\w+): ", html))
        assert failed == expected, f"{student}: failed {sorted(failed)}, expected {sorted(expected)}"


def test_grades_are_exported_with_full_marks_for_ada_only(ran):
    with open(ran / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(FAILED_TASKS)
    maximum = float(rows["ada"]["max_score"])
    assert maximum > 0 and float(rows["ada"]["score"]) == maximum
    assert all(float(rows[s]["score"]) < maximum for s in FAILED_TASKS if s != "ada")


def test_only_gwen_is_flagged_in_the_class_report(ran):
    report = (ran / "reports" / f"{A}.md").read_text(encoding="utf-8")
    flagged = report.split("## Flagged", 1)[1].split("\n\n", 2)[1]
    assert re.findall(r"\*\*(\w+)\*\*", flagged) == ["gwen"], flagged
    assert "make\\_dataloader" in flagged  # the report escapes Markdown in what a check said
    assert (ran / "reports" / f"{A}.png").stat().st_size > 0
