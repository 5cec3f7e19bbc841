"""python -m grader progress and show_progress(): which tasks pass, from the
student's saved notebooks (real runs for changed answers, nothing for stubs)."""

import json
import os
import shutil
import subprocess
import sys

import nbformat
from nbclient import NotebookClient

from grader.exercises import exercise_ids, get_exercise
from grader.cells import untouched
from grader.progress import candidates, find_root, pick_notebook
from grader.progress.find import answer_cells as _answer_cells
from tests.helpers import ROOT

EXERCISE = "02_ddp_basics"
STUB = "# YOUR CODE HERE\n    raise NotImplementedError()"
ANSWERS = {  # one correct answer, one typical mistake (no DistributedSampler)
    "pick_backend": 'return "nccl" if torch.cuda.is_available() else "gloo"',
    "make_dataloader": "return DataLoader(dataset, batch_size=batch_size, shuffle=True)",
}


def released(assignment: str = EXERCISE) -> str:
    return os.path.join(ROOT, "exercises", assignment, f"{assignment}.ipynb")


def student_copy(folder, answers=ANSWERS) -> str:
    """The released notebook with some answers written in, saved under folder/."""
    nb = nbformat.read(released(), as_version=4)
    for cell in nb.cells:
        task = cell.metadata.get("nbgrader", {}).get("grade_id", "").removesuffix("_answer")
        if task in answers:
            assert STUB in cell.source
            cell.source = cell.source.replace(STUB, answers[task])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{EXERCISE}.ipynb")
    nbformat.write(nb, path)
    return path


def progress_cli(*args, cache, cwd=ROOT):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "grader", "progress", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_released_stubs_count_as_not_started():
    for assignment in exercise_ids():
        if os.path.exists(released(assignment)):
            cells = _answer_cells(released(assignment))
            assert cells and all(untouched(c) for c in cells.values()), assignment


def test_the_course_clone_shows_every_assignment_not_started(tmp_path):
    """In the repository itself: exercises/ are the student's copies (solutions/ is never read)."""
    done = progress_cli("--json", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [a["assignment"] for a in report["assignments"]] == exercise_ids()
    for a in report["assignments"]:
        assert a["notebook"] == released(a["assignment"])
        assert {t["status"] for t in a["tasks"]} == {"todo"}


def test_progress_grades_the_saved_answers_and_caches_the_verdicts(tmp_path):
    course = tmp_path / "course"
    student_copy(course / "exercises" / EXERCISE)
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), course)

    # the cell at the top of an exercise: run in a kernel whose folder is the exercise's
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from grader.progress import show_progress\nshow_progress()")]
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the kernel inherits it
    try:
        NotebookClient(
            nb,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(course / "exercises" / EXERCISE)}},
        ).execute()
    finally:
        del os.environ["XDG_CACHE_HOME"]
    outputs = nb.cells[0].outputs
    assert not [o for o in outputs if o.get("name") == "stderr"], "nbgrader counts stderr as a failure"
    text = "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in outputs)
    assert "✓ pick_backend" in text and "✗ make_dataloader" in text and "· setup" in text
    assert "<table" in "".join(o.get("data", {}).get("text/html", "") for o in outputs)

    # the command line, from the course folder: the same verdicts, now from the cache
    done = progress_cli("--assignment", EXERCISE, cache=tmp_path / "cache", cwd=course)
    assert done.returncode == 0, done.stderr
    assert "✓ pick_backend" in done.stdout and "✗ make_dataloader" in done.stdout
    assert f"exercises/{EXERCISE}/{EXERCISE}.ipynb" in done.stdout
    status = json.loads(
        progress_cli("--json", "--assignment", EXERCISE, "--root", str(course), cache=tmp_path / "cache").stdout
    )
    tasks = {t["task"]: t for t in status["assignments"][0]["tasks"]}
    full = get_exercise(EXERCISE).points_of("pick_backend", hidden=False)
    assert tasks["pick_backend"]["status"] == "pass" and tasks["pick_backend"]["points"] == full
    assert (
        tasks["make_dataloader"]["status"] == "fail"
        and tasks["make_dataloader"]["points"] < tasks["make_dataloader"]["max_points"]
    )
    assert all(t["status"] == "todo" for name, t in tasks.items() if name not in ANSWERS)
    assert status["assignments"][0]["cached"], "graded again although nothing changed"


def test_a_changed_fetched_copy_wins_over_an_untouched_clone(tmp_path):
    untouched_copy = student_copy(tmp_path / "exercises" / EXERCISE, answers={})
    fetched = student_copy(tmp_path / "ddp-course" / EXERCISE)
    os.utime(fetched, (1_000_000, 1_000_000))
    os.utime(untouched_copy, (2_000_000, 2_000_000))  # the untouched one is the newest: still not the one worked in
    found = candidates(str(tmp_path), EXERCISE)
    assert sorted(found) == sorted([untouched_copy, fetched])
    assert pick_notebook(found) == fetched


def test_instructor_folders_are_not_the_students_notebooks(tmp_path):
    for folder in ["solutions", "autograded", "submitted", "feedback", "source"]:
        student_copy(tmp_path / folder / EXERCISE)
    assert candidates(str(tmp_path), EXERCISE) == []


def test_the_root_is_found_from_inside_a_fetched_assignment(tmp_path):
    fetched = os.path.dirname(student_copy(tmp_path / "home" / "ddp-course" / EXERCISE))
    assert find_root(fetched) == str(tmp_path / "home" / "ddp-course")
    clone = tmp_path / "clone"
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), tmp_path / "home")
    os.makedirs(tmp_path / "home" / "exercises")
    assert find_root(fetched) == str(tmp_path / "home")
    assert find_root(str(clone)) == str(clone)  # nothing around: where it was asked


def test_no_overview_inside_a_copy_nbgrader_grades(tmp_path, capsys, monkeypatch):
    from grader.progress import show_progress

    graded = tmp_path / "autograded" / "student" / EXERCISE
    student_copy(graded)
    monkeypatch.chdir(graded)
    show_progress()
    assert "not run in a submitted or graded one" in capsys.readouterr().out


def test_the_overview_says_it_grades_the_saved_notebook_and_shows_saves_and_submissions(tmp_path, monkeypatch):
    """No grading run: rows as course_progress makes them, with a submission in nbgrader's cache (make lab's)."""
    from grader.progress.grade import AssignmentProgress, TaskProgress
    from grader.progress.view import _ProgressView, text_report

    course = tmp_path / "home" / "me" / "ddp-course"
    notebook = student_copy(str(course / EXERCISE))
    cache = tmp_path / "cache"
    (cache / "ddp-course" / f"me+{EXERCISE}+2026-12-06 08:01:02.123456 UTC").mkdir(parents=True)
    (cache / "other-course" / "me+01_parallelism+2026-12-07 09:00:00.000000 UTC").mkdir(parents=True)
    (cache / "ddp-course" / f"me+{EXERCISE}+2026-12-05 07:00:00.000000 UTC").mkdir(parents=True)  # an older one
    monkeypatch.setenv("NBGRADER_CACHE", str(cache))
    rows = [
        AssignmentProgress(EXERCISE, notebook, [TaskProgress("setup", "pass", 1, 1, 1, 1)]),
        AssignmentProgress("01_parallelism", str(course / "01_parallelism" / "01_parallelism.ipynb")),
    ]
    rows[1].tasks = [TaskProgress("shard_indices", "todo")]
    report = text_report(rows, str(course))
    assert "saved notebooks" not in report and "as saved in ddp-course, not on your kernel" in report, report
    assert "check() in the kernel may differ" in report
    assert str(tmp_path) not in report, report  # paths relative to the course
    assert f"{EXERCISE}/{EXERCISE}.ipynb" in report
    assert "submitted 2026-12-06 08:01:02 UTC" in report, report  # the latest, of this course only
    assert report.count("not submitted") == 1 and "2026-12-07" not in report, report
    saved = __import__("time").strftime("%Y-%m-%d %H:%M", __import__("time").localtime(os.path.getmtime(notebook)))
    assert f"saved {saved}" in report
    view = _ProgressView(str(course), 2)
    view.rows, view.done = rows, True
    page = view._repr_html_()
    assert "submitted 2026-12-06 08:01:02 UTC" in page and "not on your kernel" in page and str(tmp_path) not in page
