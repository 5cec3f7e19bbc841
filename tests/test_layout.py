"""The course layout: dependencies in step, exercises/ generated from solutions/
(the cells' conventions and points: tests/test_cells.py)."""

import filecmp
import os
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from grader.exercises import exercise_ids
from tests.helpers import ROOT

ASSIGNMENTS = [a for a in exercise_ids() if os.path.isdir(os.path.join(ROOT, "solutions", a))]


def test_top_level_layout():
    for name in [
        "lessons",
        "exercises",
        "solutions",
        "grader",
        "tests",
        "environment.yml",
        "Makefile",
        "README.md",
        "pyproject.toml",
        "nbgrader_config.py",
        ".ci/run",
    ]:
        assert os.path.exists(os.path.join(ROOT, name)), f"missing {name}"


def test_environment_yml_mirrors_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    with open(os.path.join(ROOT, "environment.yml")) as f:
        env = yaml.safe_load(f)
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert [d for d in pip if d != "-e ."] == deps


def test_test_tools_are_an_extra_not_a_runtime_dependency():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    runtime = " ".join(project["dependencies"])
    for tool in ("pytest", "nbval", "playwright"):
        assert tool not in runtime, f"{tool} is only for tests: put it in the `test` extra"
        assert any(d.startswith(tool) for d in project["optional-dependencies"]["test"])


def test_torch_is_pinned():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert "torch==2.13.0" in deps, "an open torch range pulls a multi-GB CUDA build on CPU machines"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exercises_are_generated_from_solutions(assignment, tmp_path):
    """exercises/<a> must be exactly what nbgrader generates from solutions/<a>."""
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), course)
    shutil.copytree(os.path.join(ROOT, "solutions", assignment), course / "solutions" / assignment)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force", "--log-level=ERROR"],
        cwd=course,
        env=env,
        check=True,
        timeout=300,
    )
    fresh, committed = course / "exercises" / assignment, os.path.join(ROOT, "exercises", assignment)
    cmp = filecmp.dircmp(fresh, committed)
    assert not cmp.left_only and not cmp.right_only, f"files differ: {cmp.left_only} {cmp.right_only}"
    for name in cmp.common_files:
        with open(fresh / name, "rb") as a, open(os.path.join(committed, name), "rb") as b:
            assert a.read() == b.read(), f"exercises/{assignment}/{name} is out of date: run `make exercises`"
