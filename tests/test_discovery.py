"""Exercises are found by convention (grader/exercises/__init__.py states the contract).

A new exercise package in a copy of the grader is graded, listed, preloaded and built for
students without touching any list; the check order is the notebook's; a module that fails
to import is reported with its traceback before anything is graded; the engine names no
exercise, and a public rank never holds a hidden module.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from grader.exercises import discover, exercise_ids, get_exercise
from tests.helpers import ROOT

GRADER = os.path.join(ROOT, "grader")
TIMEOUT_S = 300  # a fresh interpreter importing torch, on a loaded machine

DEMO = {
    "__init__.py": """
        from grader.checks import Exercise

        EXERCISE = Exercise("99_demo", tasks=["first", "second"])
        """,
    "checks_0.py": """
        from grader.exercises.zz_demo import EXERCISE

        @EXERCISE.check("first")
        def c_first(g):
            pass
        """,
    "checks_b.py": """
        from grader.exercises.zz_demo import EXERCISE

        @EXERCISE.check("first", points=2)
        def b_first(g):
            pass
        """,
    "checks_a.py": """
        import sys

        from grader.exercises.zz_demo import EXERCISE

        @EXERCISE.check("second")
        def a_second(g):
            pass

        @EXERCISE.check("first")
        def a_first(g):
            pass

        def modules_in_rank(ctx):
            return sorted(m for m in sys.modules if m.startswith("grader.exercises.zz_demo."))
        """,
    "hidden_a.py": """
        from grader.exercises.zz_demo import EXERCISE

        @EXERCISE.check("first", hidden=True)
        def h_first(g):
            pass
        """,
    "reference.py": "ANSWER = 42\n",
}

PROBE = """
import json, sys
from grader.engine import run_distributed
from grader.engine.processes import PRELOAD
from grader.exercises import exercise_ids, get_exercise
exercise = get_exercise("99_demo")
out = {"ids": exercise_ids(), "checks": [[c.name, c.task, c.hidden, c.points] for c in exercise.checks],
       "preload": [m for m in PRELOAD if "zz_demo" in m]}
if "--rank" in sys.argv:
    from grader.exercises.zz_demo.checks_a import modules_in_rank
    result = run_distributed(modules_in_rank, world_size=1, timeout=60)
    assert result.ok, result.failure()
    out["rank"] = result.ranks[0].value
print(json.dumps(out))
"""


def _copy(tmp_path, files: dict[str, str]):
    """The grader as it is (what git does not ignore), and pyproject.toml for the student build, copied,
    with the demo exercise added."""
    root = tmp_path / "repo"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "grader"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\0")
    for path in filter(None, listed):
        if os.path.isfile(os.path.join(ROOT, path)):  # a file deleted but not yet committed is not copied
            os.makedirs(os.path.dirname(root / path), exist_ok=True)
            shutil.copy(os.path.join(ROOT, path), root / path)
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), root / "pyproject.toml")
    demo = root / "grader" / "exercises" / "zz_demo"
    demo.mkdir()
    for name, text in files.items():
        (demo / name).write_text(textwrap.dedent(text))
    return root


def _python(root, *args, env=None):
    environ = {k: v for k, v in os.environ.items() if k != "GRADER_HIDDEN_MASKED"}
    environ.update(PYTHONPATH=str(root), **(env or {}))
    done = subprocess.run(
        [sys.executable, *args], cwd=root, env=environ, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    return done


def _probe(root, *args, env=None) -> dict:
    done = _python(root, "-c", PROBE, *args, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_package_is_an_exercise_without_touching_any_list(tmp_path):
    """Public modules (checks_*.py by name), then hidden ones; each task's public
    checks in that order, then its hidden ones; the forkserver preloads the public modules only,
    so a public rank holds them and no hidden one."""
    root = _copy(tmp_path, DEMO)
    seen = _probe(root, "--rank")
    assert "99_demo" in seen["ids"] and seen["ids"] == sorted(seen["ids"])
    assert seen["checks"] == [
        ["c_first", "first", False, 1],
        ["a_first", "first", False, 1],
        ["b_first", "first", False, 2],
        ["h_first", "first", True, 1],
        ["a_second", "second", False, 1],
    ]
    public = [
        "grader.exercises.zz_demo.checks_0",
        "grader.exercises.zz_demo.checks_a",
        "grader.exercises.zz_demo.checks_b",
    ]
    assert seen["preload"] == public
    assert seen["rank"] == public, "a public rank must hold the public check modules, never a hidden one"

    listed = _python(root, "-m", "grader", "list", "--json")
    assert listed.returncode == 0, listed.stderr[-4000:]
    demo = [json.loads(line) for line in listed.stdout.splitlines() if '"99_demo"' in line]
    assert demo and demo[0]["tasks"] == ["first", "second"] and demo[0]["max_score"] == 6


def test_a_public_phase_sandbox_loads_no_hidden_module(tmp_path):
    root = _copy(tmp_path, DEMO)
    seen = _probe(root, env={"GRADER_HIDDEN_MASKED": "1"})
    assert [c[0] for c in seen["checks"]] == ["c_first", "a_first", "b_first", "a_second"]


def test_the_student_build_leaves_out_what_discovery_calls_hidden(tmp_path):
    root = _copy(tmp_path, DEMO)
    done = _python(root, "-m", "grader", "student-build", str(tmp_path / "student"))
    assert done.returncode == 0, done.stderr[-4000:]
    shipped = tmp_path / "student" / "grader" / "exercises" / "zz_demo"
    assert sorted(p.name for p in shipped.iterdir()) == [
        "__init__.py",
        "checks_0.py",
        "checks_a.py",
        "checks_b.py",
        "reference.py",
    ]
    seen = _probe(tmp_path / "student")
    assert [c[0] for c in seen["checks"]] == ["c_first", "a_first", "b_first", "a_second"]


def test_an_instructor_install_without_hidden_modules_refuses_to_grade_less(tmp_path):
    root = _copy(tmp_path, {k: v for k, v in DEMO.items() if not k.startswith("hidden_")})
    done = _python(root, "-m", "grader", "list")
    assert done.returncode != 0 and "grader.exercises.zz_demo has no hidden_*.py module" in done.stderr


def test_a_broken_check_module_is_reported_with_its_traceback_before_grading(tmp_path):
    broken = {**DEMO, "checks_c.py": "import torch\n\nraise RuntimeError('broken on purpose')\n"}
    root = _copy(tmp_path, broken)
    (root / "answer.py").write_text("def first():\n    return 1\n")
    course = root / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    for args in (
        ["-m", "grader", "list"],
        ["-m", "grader", "check", "99_demo", "answer.py"],
        ["-m", "grader", "grade", "99_demo", "--root", str(course), "--quiet"],
    ):
        done = _python(root, *args)
        assert done.returncode != 0, done.stdout
        assert "Traceback" in done.stderr and "checks_c.py" in done.stderr and "broken on purpose" in done.stderr
        assert "score" not in done.stdout, "nothing may be graded with a broken exercise"
    assert sorted(os.listdir(course)) == ["nbgrader_config.py"], "make grade wrote something"


def test_a_package_without_a_declaration_is_named(tmp_path):
    root = _copy(tmp_path, {**DEMO, "__init__.py": "X = 1\n"})
    done = _python(root, "-m", "grader", "list")
    assert done.returncode != 0 and "grader.exercises.zz_demo declares no EXERCISE" in done.stderr


def test_checks_run_in_the_notebooks_order():
    """Task by task (the notebook's order), each task's public checks before its hidden ones."""
    for exercise_id in exercise_ids():
        exercise = get_exercise(exercise_id)
        keys = [(exercise.tasks.index(c.task), c.hidden) for c in exercise.checks]
        assert keys == sorted(keys), exercise_id
        assert {c.task for c in exercise.checks} == set(exercise.tasks), f"{exercise_id}: a task without checks"


def _names(path: str) -> set[str]:
    """Every module `path` names: in an import statement (a from-import: the module and module.name),
    or as a string (importlib.import_module, a preload list)."""
    tree = ast.parse(open(path).read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("grader."):
            if all(part.isidentifier() for part in node.value.split(".")):
                names.add(node.value)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_a_declaration_imports_no_check_module_and_the_engine_no_exercise():
    for found in discover().values():
        declared = _names(os.path.join(found.folder, "__init__.py"))
        assert not declared & {*found.public, *found.hidden}, f"{found.package}/__init__.py imports checks"
    engine = os.path.join(GRADER, "engine")
    for name in sorted(os.listdir(engine)):
        if name.endswith(".py"):
            path = os.path.join(engine, name)
            named = {n for n in _names(path) if n.startswith("grader.exercises")}
            assert not named, f"engine/{name} names the exercises: {named}"


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_check_module_on_disk_is_discovered(exercise_id):
    found = discover()[exercise_id]
    on_disk = {n[:-3] for n in os.listdir(found.folder) if n.endswith(".py") and (n.startswith(("checks_", "hidden_")))}
    assert {m.rpartition(".")[2] for m in (*found.public, *found.hidden)} == on_disk
    assert found.hidden, "the instructor's grader holds hidden checks for every exercise"


def test_a_bare_checks_module_is_refused_not_ignored(tmp_path):
    """One convention: public checks live in checks_<topic>.py; a bare checks.py would otherwise grade nothing."""
    root = _copy(tmp_path, {**DEMO, "checks.py": DEMO["checks_a.py"]})
    done = _python(root, "-m", "grader", "list")
    assert done.returncode != 0 and "grader.exercises.zz_demo.checks: name it checks_<topic>.py" in done.stderr
