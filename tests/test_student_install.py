"""A student's server holds no answers, and still grades.

`python -m grader student-build` is installed into a fresh venv that cannot see the
instructor's grader (torch and the rest come from the course venv's site-packages as a
plain path: its editable install of `grader` is not activated there). The test lists
what the install holds and fails on any hidden module, hidden check, solution region or
answer (a function or class named after a task); then it grades, in that venv, each
solution with the public checks (full public marks) and each untouched release (0).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

from grader.exercises import exercise_ids, get_exercise
from grader.course.student_build import SOLUTION_MARK, STAMP, BuildError, build, leaks

ROOT = Path(__file__).resolve().parent.parent
# Answer-equivalent references the instructor's install held (now in hidden_*.py or gone).
KNOWN_ANSWERS = {
    "wrap_model",
    "make_dataloader",
    "read_dist_env",
    "grader_command",
    "contiguous_shards",
    "node_command",
}
GRADE_TIMEOUT_S = 900


def _run(cmd, timeout, cwd=None, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, **kw)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """(python of the fresh venv, its site-packages, the build folder)."""
    base = tmp_path_factory.mktemp("student")
    out = build(base / "build")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], 120).check_returncode()
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 60).stdout.strip()
    )
    # The course venv's packages (torch, pip, setuptools, ...) as a plain path: no .pth of it runs here.
    (site / "course_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = _run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", str(out)],
        300,
        cwd=base,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    where = _run([str(python), "-c", "import grader; print(grader.__file__)"], 60, cwd=base)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).resolve() == site.resolve() / "grader" / "__init__.py", (
        f"the fresh venv imports the instructor's grader: {where.stdout}"
    )
    return python, site, out


def _task_names() -> set[str]:
    return {task for exercise_id in exercise_ids() for task in get_exercise(exercise_id).tasks}


def _solution_regions() -> list[tuple[str, list[str]]]:
    """Every solution region of every solution notebook: (where, its code lines, stripped)."""
    regions = []
    for exercise_id in exercise_ids():
        notebook = nbformat.read(ROOT / get_exercise(exercise_id).notebook, as_version=4)
        for cell in notebook.cells:
            for i, block in enumerate(re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)):
                lines = [s for s in (line.strip() for line in block.splitlines()) if s and not s.startswith("#")]
                if len(lines) >= 2:
                    regions.append((f"{exercise_id} {cell.metadata.get('nbgrader', {}).get('grade_id')} #{i}", lines))
    return regions


def _normalized(text: str) -> str:
    return "\n".join(s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith("#"))


def test_student_install_holds_no_answers(student):
    python, site, out = student
    files = sorted(p for p in (site / "grader").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    sources = [p for p in files if p.suffix == ".py"]
    assert (site / "grader" / "STUDENT_BUILD").is_file()
    assert len(sources) > 50, f"the install holds only {len(sources)} modules"
    assert not [p for p in files if p.name.startswith("hidden_")]
    assert not (site / "solutions").exists() and not list(site.rglob("*.ipynb"))
    assert leaks(site / "grader") == [] and leaks(out / "course") == []
    assert sorted((out / "course" / "exercises").glob("*/*.ipynb")), "the build holds no released notebook"

    forbidden = _task_names() | KNOWN_ANSWERS
    named, hidden_calls = [], []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in forbidden:
                named.append(f"{path.relative_to(site)}:{node.lineno} {node.name}")
            if isinstance(node, ast.Call) and any(
                k.arg == "hidden" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords
            ):
                hidden_calls.append(f"{path.relative_to(site)}:{node.lineno}")
    assert not named, f"functions or classes named after a task or a known answer: {named}"
    assert not hidden_calls, f"hidden checks registered in: {hidden_calls}"

    installed = {p: _normalized(p.read_text()) for p in sources}
    copies = [
        (where, str(p.relative_to(site)))
        for where, lines in _solution_regions()
        for p, text in installed.items()
        if "\n".join(lines) in text
    ]
    assert not copies, f"solution regions found verbatim in the install: {copies}"

    # The registry as the student's grader sees it: every task, no hidden check, the public points, and no
    # typical mistake (it quotes a line of the answer).
    probe = (
        "import json; from grader.exercises import exercise_ids, get_exercise\n"
        "print(json.dumps({e: {'tasks': get_exercise(e).tasks, 'hidden': sum(c.hidden for c in "
        "get_exercise(e).checks), 'points': get_exercise(e).max_score, "
        "'mistakes': get_exercise(e).typical_mistakes} for e in exercise_ids()}))"
    )
    seen = _run([str(python), "-c", probe], 300, cwd=out.parent)
    assert seen.returncode == 0, seen.stderr
    registry = json.loads(seen.stdout)
    for exercise_id in exercise_ids():
        exercise = get_exercise(exercise_id)
        public = sum(c.points for c in exercise.checks_for(hidden=False))
        assert registry[exercise_id] == {"tasks": exercise.tasks, "hidden": 0, "points": public, "mistakes": []}


def _grade(python: Path, exercise_id: str, notebook: Path, cwd: Path) -> dict:
    done = _run([str(python), "-m", "grader", "check", exercise_id, str(notebook), "--json"], GRADE_TIMEOUT_S, cwd=cwd)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(GRADE_TIMEOUT_S + 60)
@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_student_install_grades_solution_full_public_marks(student, exercise_id):
    python, _, out = student
    exercise = get_exercise(exercise_id)
    report = _grade(python, exercise_id, ROOT / exercise.notebook, out.parent)
    public = exercise.checks_for(hidden=False)
    assert [c["name"] for c in report["checks"]] == [c.name for c in public]
    assert not any(c["hidden"] for c in report["checks"])
    failed = [(c["name"], c["message"]) for c in report["checks"] if not c["passed"]]
    assert not failed and report["score"] == report["max_score"] == sum(c.points for c in public), failed


@pytest.mark.timeout(GRADE_TIMEOUT_S + 60)
def test_student_install_grades_untouched_release_zero(student):
    """Once, on the class's exercise: every release's 0 on every check is asserted from make selfcheck's grading
    (tests/test_selfcheck.py); here, that the student build grades a release as the course does."""
    python, _, out = student
    exercise_id = "02_ddp_basics"
    release = out / "course" / "exercises" / exercise_id / f"{exercise_id}.ipynb"
    report = _grade(python, exercise_id, release, out.parent)
    assert report["score"] == 0 and report["max_score"] > 0, report


def test_student_install_refuses_to_grade_a_class(student, tmp_path):
    """Without hidden checks its grades would be wrong: make grade says so and writes nothing."""
    python, _, _ = student
    done = _run(
        [str(python), "-m", "grader", "grade", "02_ddp_basics", "--root", str(tmp_path), "--quiet"], 300, cwd=tmp_path
    )
    assert done.returncode == 2 and "student build" in done.stderr, done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == [], "something was written"


def test_build_refuses_a_folder_that_is_not_a_student_build(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BuildError, match="not an earlier student build"):
        build(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    done = _run([sys.executable, "-m", "grader", "student-build", str(tmp_path)], 120, cwd=ROOT)
    assert done.returncode == 2 and "not an earlier student build" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_build_replaces_an_earlier_build(tmp_path):
    out = build(tmp_path / "b")
    (out / "grader" / "hidden_stale.py").write_text("x = 1\n")  # left over from somewhere
    build(out)
    assert (out / STAMP).is_file() and not (out / "grader" / "hidden_stale.py").exists()


def test_the_leak_scan_finds_a_solution_region(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")
    (tmp_path / "hidden_checks.py").write_text("")
    assert len(leaks(tmp_path)) == 2 and SOLUTION_MARK.pattern


def test_instructor_install_loads_every_hidden_module():
    """A hidden module the exercise's checks.py does not name would register nothing: each one in
    git is loaded by the registry (the student build leaves them all out)."""
    listed = _run(["git", "ls-files", "grader/exercises/*/hidden_*.py"], 60, cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    paths = listed.stdout.split()
    assert paths, "no hidden module in git"
    for exercise_id in exercise_ids():
        get_exercise(exercise_id)
    modules = {".".join(Path(p).with_suffix("").parts) for p in paths}
    assert modules <= set(sys.modules), f"hidden modules no exercise loads: {sorted(modules - set(sys.modules))}"
