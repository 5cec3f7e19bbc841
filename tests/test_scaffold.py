"""python -m grader new-exercise (grader/course/scaffold.py): a newcomer adds a one-task exercise by touching only
the files the scaffold made.

The end-to-end part works in a copy of the repository (grader/, solutions/, exercises/, the Makefile,
nbgrader's config, the test helpers) run with this venv's Python and PYTHONPATH pointing at the copy:
scaffold, fill in the task and a real check, `make exercises`, then the CLI grades it (the solution full
marks, the release 0), `make student` ships it without its hidden module, the digest covers it and
`python -m grader list` lists it."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import cells, cli
from grader.course.scaffold import ScaffoldError, create, next_free_id
from tests.helpers import ROOT

TASK, PACKAGE = "my_task", "my_topic"
ID = next_free_id(Path(ROOT), PACKAGE)  # the number after the course's last exercise, as a newcomer would pick
SCAFFOLDED = [
    f"grader/exercises/{PACKAGE}/__init__.py",
    f"grader/exercises/{PACKAGE}/checks_{TASK}.py",
    f"grader/exercises/{PACKAGE}/hidden_{TASK}.py",
    f"grader/exercises/{PACKAGE}/reference.py",
    f"grader/exercises/{PACKAGE}/hints.py",
    f"solutions/{ID}/{ID}.ipynb",
    f"tests/exercises/test_{ID}.py",
]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def course(tmp_path):
    """A minimal course folder: one exercise package and its solution folder."""
    shutil.copytree(
        Path(ROOT) / "grader" / "exercises" / "ddp_basics",
        tmp_path / "grader" / "exercises" / "ddp_basics",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (tmp_path / "solutions" / "02_ddp_basics").mkdir(parents=True)
    return tmp_path


# ------------------------------------------------------------------ what it writes
def test_the_notebook_carries_nbgrader_metadata_as_grader_cells_states_it(course):
    written = create(course, ID, TASK)
    assert sorted(str(p.relative_to(course)) for p in written) == sorted(SCAFFOLDED)
    notebook = nbformat.read(course / "solutions" / ID / f"{ID}.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    setup = next(c for c in code if cells.grade_id(c) == "setup")
    assert f'checker("{ID}")' in setup.source and cells.nbgrader_meta(setup)["locked"]
    assert f'hint = hinter("{ID}")' in setup.source
    assert code.index(setup) < code.index(cells.answer_cells(notebook.cells)[TASK])

    answers, checks = cells.answer_cells(notebook.cells), cells.check_cells(notebook.cells)
    assert list(answers) == list(checks) == [TASK]
    answer = cells.nbgrader_meta(answers[TASK])
    assert answer == {
        "grade": False,
        "grade_id": f"{TASK}_answer",
        "locked": False,
        "schema_version": 3,
        "solution": True,
    }
    assert re.search(rf"def {TASK}\(.*### BEGIN SOLUTION\n.+### END SOLUTION", answers[TASK].source, re.S)
    check = cells.nbgrader_meta(checks[TASK])
    assert check == {
        "grade": True,
        "grade_id": f"{TASK}_check",
        "locked": True,
        "points": 3,
        "schema_version": 3,
        "solution": False,
    }
    assert checks[TASK].source.startswith(f'check("{TASK}")')
    assert f'check("{TASK}", hidden=True)' in cells.hidden_region(checks[TASK])
    locked_ids = [cells.grade_id(c) for c in code if cells.nbgrader_meta(c).get("locked")]
    assert len(locked_ids) == len(set(locked_ids)), "grade ids must be unique"


def test_the_python_files_compile_and_name_nothing_after_the_task(course):
    create(course, ID, TASK)
    for relative in SCAFFOLDED:
        if relative.endswith(".py"):
            tree = ast.parse((course / relative).read_text(), relative)
            named = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            assert TASK not in named, f"{relative} defines {TASK}: tests/test_student_install.py forbids it"
    declared = (course / SCAFFOLDED[0]).read_text()
    assert f'EXERCISE = Exercise("{ID}", tasks=["{TASK}"])' in declared


def test_its_files_pass_the_linter_and_its_row_joins_the_readmes_course_table(course):
    readme = (
        "# Course\n\n| # | Lesson | Exercise | What |\n|---|---|---|---|\n| 2 | x | `02_ddp_basics` | y |\n\nMore.\n"
    )
    (course / "README.md").write_text(readme)
    (course / "pyproject.toml").write_bytes((Path(ROOT) / "pyproject.toml").read_bytes())  # the course's ruff rules
    create(course, ID, TASK)
    ruff = [sys.executable, "-m", "ruff"]
    for args in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        done = subprocess.run([*ruff, *args, *SCAFFOLDED], cwd=course, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in (course / "README.md").read_text().splitlines() if line.startswith("| ")]
    assert rows[-1].startswith(f"| {int(ID[:2])} |") and f"`{ID}`" in rows[-1] and f"`{TASK}`" in rows[-1]
    assert (course / "README.md").read_text().endswith("\n\nMore.\n")


# ------------------------------------------------------------------ what it refuses
@pytest.mark.parametrize(
    "exercise_id, task, phrase",
    [
        ("5_x", TASK, "malformed exercise id '5_x'"),
        ("05-x", TASK, "malformed exercise id"),
        ("05_My", TASK, "malformed exercise id"),
        ("005_x", TASK, "malformed exercise id"),
        ("05_", TASK, "malformed exercise id"),
        ("05_class", TASK, "'class' is a Python keyword"),
        (ID, "my-task", "malformed task name 'my-task'"),
        (ID, "_hidden", "malformed task name"),
        (ID, "lambda", "malformed task name"),
        ("02_ddp_basics", TASK, "exercise 02_ddp_basics exists already (grader/exercises/ddp_basics/"),
        ("02_other", TASK, "exercise number 02 is taken by 02_ddp_basics"),
        ("06_ddp_basics", TASK, "grader/exercises/ddp_basics exists already"),
        (ID, "save_checkpoint", "task name 'save_checkpoint' is used by exercise 02_ddp_basics already"),
        (ID, "MiniDDP", "task name 'MiniDDP' is used by exercise 02_ddp_basics already"),
    ],
)
def test_a_malformed_or_existing_id_is_refused_and_nothing_is_written(course, exercise_id, task, phrase):
    before = files_under(course)
    with pytest.raises(ScaffoldError) as refused:
        create(course, exercise_id, task)
    assert phrase in str(refused.value)
    assert files_under(course) == before


def test_a_file_in_the_way_is_kept_and_nothing_is_written(course):
    mine = course / "tests" / "exercises" / f"test_{ID}.py"
    mine.parent.mkdir(parents=True)
    mine.write_text("# my own work\n")
    before = files_under(course)
    with pytest.raises(ScaffoldError, match=f"tests/exercises/test_{ID}.py"):
        create(course, ID, TASK)
    assert files_under(course) == before and not (course / "grader" / "exercises" / PACKAGE).exists()


def test_the_next_free_id_follows_the_last_exercise(course):
    assert next_free_id(course, "my_topic") == "03_my_topic"
    create(course, "07_later", "later_task")
    assert next_free_id(course, "x") == "08_x"


def test_the_cli_says_why_with_exit_code_2(course, tmp_path, capsys):
    assert cli.main(["new-exercise", "5_x", "--task", TASK, "--root", str(course)]) == 2
    assert "malformed exercise id '5_x'" in capsys.readouterr().err
    assert cli.main(["new-exercise", ID, "--task", TASK, "--root", str(tmp_path / "nowhere")]) == 2
    assert "is not the course repository" in capsys.readouterr().err


# ------------------------------------------------------------------ end to end, in a copy of the repository
ANSWER = f"""import torch
import torch.distributed as dist


def {TASK}(tensor: torch.Tensor) -> torch.Tensor:
    ### BEGIN SOLUTION
    total = tensor.clone()
    dist.all_reduce(total)
    return total / dist.get_world_size()
    ### END SOLUTION"""

CHECKS = f'''"""{ID}: {TASK}, the mean of a tensor over all ranks."""
from grader.checks import CheckFailed
from grader.exercises.{PACKAGE} import EXERCISE
from grader.exercises.{PACKAGE} import reference as ref


def answer_in_rank(ctx, student, length):
    return student.task("{TASK}")(ref.rank_input(ctx.rank, length).to(ctx.device)).detach().cpu()


def judge_means(g, per_rank, length):
    expected = ref.sum_over_ranks(len(per_rank), length) / len(per_rank)
    for rank, got in enumerate(per_rank):
        if g.close(got, expected * len(per_rank)):
            raise CheckFailed(f"rank {{rank}} returned the sum of the ranks' tensors: divide by the world size")
        g.assert_close(got, expected, f"rank {{rank}}'s result", "every rank must return the mean")


@EXERCISE.check("{TASK}", points=3)
def returns_the_mean_over_ranks(g):
    """Every rank returns the mean of all ranks' tensors."""
    judge_means(g, g.run(answer_in_rank, 8), 8)
'''

HIDDEN = f'''"""{ID}: {TASK}, hidden: three ranks."""
from grader.exercises.{PACKAGE} import EXERCISE
from grader.exercises.{PACKAGE}.checks_{TASK} import answer_in_rank, judge_means

EXERCISE.typical_mistakes.append(("return total / dist.get_world_size()", "return total  # the sum"))


@EXERCISE.check("{TASK}", points=1.5, hidden=True, world_size=3)
def means_over_three_ranks(g):
    judge_means(g, g.run(answer_in_rank, 5, world_size=3), 5)
'''


TEST = f'''"""{ID}: the mean over ranks gets full marks; the sum is told to divide."""
from grader.exercises import get_exercise
from tests.helpers import failed, grade_source, replace_definition, solution_source


def test_solution_gets_full_marks():
    report = grade_source("{ID}", solution_source("{ID}"))
    assert failed(report) == {{}} and report.score == get_exercise("{ID}").max_score


def test_the_sum_is_told_to_divide():
    wrong = "def {TASK}(tensor):\\n    total = tensor.clone()\\n    dist.all_reduce(total)\\n    return total\\n"
    report = grade_source("{ID}", replace_definition(solution_source("{ID}"), "{TASK}", wrong), task="{TASK}")
    assert report.score == 0 and "divide by the world size" in failed(report)["returns_the_mean_over_ranks"]
'''


def run(copy: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(copy), PATH=f"{copy / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(list(args), cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


def python(copy: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run(copy, str(copy / ".venv" / "bin" / "python"), *args, timeout=timeout)


def make(copy: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # -o: the copy shares this venv (a link), already installed: make must never reinstall into it
    return run(copy, "make", "-o", ".venv/.installed", "-o", ".venv/.installed-test", *args, timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def digests(copy: Path) -> dict[str, str]:
    code = (
        f"from grader.code_digest import grader_digest as d; import json; print(json.dumps({{e: d(e) for e in "
        f"['{ID}', '02_ddp_basics']}}))"
    )
    return json.loads(ok(python(copy, "-c", code)).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    if not shutil.which("make"):
        pytest.fail("make is needed to run the course's own targets (apt-get install make)")
    copy = tmp_path_factory.mktemp("course")
    # the whole course as a clone has it (what git tracks): the fast tier that make test-exercise runs reads the
    # README, docs, samples and lessons too
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60, check=True)
    for relative in tracked.stdout.decode().split("\0"):
        if relative and os.path.isfile(os.path.join(ROOT, relative)):
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, relative), copy / relative)
    (copy / ".venv").symlink_to(Path(sys.prefix))
    assert (copy / ".venv" / ".installed").exists(), "this venv was not installed by make install"
    before = files_under(copy)
    out = ok(python(copy, "-m", "grader", "new-exercise", ID, "--task", TASK))
    assert out.split("\n\n")[0].split() == SCAFFOLDED
    assert sorted(set(files_under(copy)) - set(before)) == sorted(SCAFFOLDED)
    return copy


def test_the_scaffold_as_it_stands_passes_its_own_tests(scaffolded):
    done = python(scaffolded, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/exercises/test_{ID}.py")
    assert "2 passed" in ok(done), done.stdout


@pytest.fixture(scope="module")
def filled(scaffolded):
    """The newcomer's work: the task's answer in the notebook, a real check and a hidden one in the
    package (only files the scaffold made), then `make exercises` for this exercise."""
    copy = scaffolded
    digest_before = digests(copy)
    path = copy / "solutions" / ID / f"{ID}.ipynb"
    notebook = json.loads(path.read_text())
    cells.answer_cells(notebook["cells"])[TASK]["source"] = ANSWER
    path.write_text(json.dumps(notebook, indent=1) + "\n")
    (copy / "grader" / "exercises" / PACKAGE / f"checks_{TASK}.py").write_text(CHECKS)
    (copy / "grader" / "exercises" / PACKAGE / f"hidden_{TASK}.py").write_text(HIDDEN)
    (copy / "tests" / "exercises" / f"test_{ID}.py").write_text(TEST)
    hints = copy / "grader" / "exercises" / PACKAGE / "hints.py"  # the new check's own hint, as CONTRIBUTING says
    hints.write_text(
        hints.read_text().replace(
            '"returns_the_sum_over_ranks": "Every rank must return the same tensor: the sum of every rank\'s input."',
            '"returns_the_mean_over_ranks": "Every rank must return the same tensor: the mean of every rank\'s input."',
        )
    )
    out = ok(make(copy, "exercises", f"ASSIGNMENTS={ID}"))
    assert f"{TASK}_check has 3 points, its checks give 4.5 (public 3 + hidden 1.5)" in out
    assert f"{ID}: generating exercises/{ID}" in out
    for lang in ("es", "nl", "ja"):  # make exercises made the new release's catalogs
        assert list((copy / "locale" / lang / "LC_MESSAGES").glob(f"*{ID}*.po")), lang
    again = ok(make(copy, "exercises", f"ASSIGNMENTS={ID}"))
    assert f"{ID}: release up to date" in again and "generating" not in again
    return copy, digest_before


@pytest.mark.timeout(1800)  # make test-exercise runs the fast tier in the copy, on one worker
def test_the_tests_contributing_names_pass_for_the_filled_exercise(filled):
    copy, _ = filled
    done = make(copy, "test-exercise", f"ASSIGNMENT={ID}", "TEST_WORKERS=0", timeout=1500)  # the fast tier too
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_make_exercises_stamped_the_points_into_solution_and_release(filled):
    copy, _ = filled
    for kind in ("solutions", "exercises"):
        check = cells.check_cells(cells.read_cells(str(copy / kind / ID / f"{ID}.ipynb")))[TASK]
        assert cells.check_points(check) == 4.5, kind
    release = (copy / "exercises" / ID / f"{ID}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in release and "hidden=True" not in release and "NotImplementedError" in release


def test_the_cli_gives_the_solution_full_marks_and_the_release_nothing(filled):
    copy, _ = filled
    for kind, score in (("solutions", 4.5), ("exercises", 0)):
        done = python(copy, "-m", "grader", "check", ID, f"{kind}/{ID}/{ID}.ipynb", "--json")
        assert done.returncode == (0 if score else 1), done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert (report["score"], report["max_score"]) == (score, 4.5), report
        assert {c["name"] for c in report["checks"]} == {"returns_the_mean_over_ranks", "means_over_three_ranks"}


def test_make_student_ships_it_without_its_hidden_module(filled):
    copy, _ = filled
    ok(make(copy, "student"))
    build = copy / "build" / "student"
    package = build / "grader" / "exercises" / PACKAGE
    assert sorted(p.name for p in package.glob("*.py")) == [
        "__init__.py",
        f"checks_{TASK}.py",
        "hints.py",
        "reference.py",
    ]
    assert (build / "course" / "exercises" / ID / f"{ID}.ipynb").is_file()
    listed = subprocess.run(
        [str(copy / ".venv" / "bin" / "python"), "-m", "grader", "list", "--json"],
        cwd=build,
        env=dict(os.environ, PYTHONPATH=str(build)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = {row["id"]: row for row in map(json.loads, ok(listed).splitlines())}
    assert (rows[ID]["tasks"], rows[ID]["max_score"]) == ([TASK], 3), "the student's grader: public points only"


def test_the_digest_covers_it_and_list_lists_it(filled):
    copy, before = filled
    after = digests(copy)
    assert after[ID] != before[ID], "the exercise's checks changed, its digest did not"
    assert after["02_ddp_basics"] == before["02_ddp_basics"], "another exercise's digest moved"
    lines = ok(python(copy, "-m", "grader", "list")).splitlines()
    assert any(line.split()[0] == ID and "1 task, 4.5 points" in line for line in lines), lines
