"""The course layout: dependencies in step, exercises/ generated from solutions/,
check-cell points equal to the checks' points."""
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from grader.exercises import MODULES, get_exercise
from tests.helpers import ROOT

ASSIGNMENTS = [a for a in MODULES if os.path.isdir(os.path.join(ROOT, "solutions", a))]


def test_top_level_layout():
    for name in ["lessons", "exercises", "solutions", "grader", "tests", "environment.yml", "Makefile",
                 "README.md", "pyproject.toml", "nbgrader_config.py", ".ci/run"]:
        assert os.path.exists(os.path.join(ROOT, name)), f"missing {name}"


def test_environment_yml_mirrors_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    with open(os.path.join(ROOT, "environment.yml")) as f:
        env = yaml.safe_load(f)
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert [d for d in pip if d != "-e ."] == deps


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
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force",
                    "--log-level=ERROR"], cwd=course, env=env, check=True, timeout=300)
    fresh, committed = course / "exercises" / assignment, os.path.join(ROOT, "exercises", assignment)
    cmp = filecmp.dircmp(fresh, committed)
    assert not cmp.left_only and not cmp.right_only, f"files differ: {cmp.left_only} {cmp.right_only}"
    for name in cmp.common_files:
        with open(fresh / name, "rb") as a, open(os.path.join(committed, name), "rb") as b:
            assert a.read() == b.read(), f"exercises/{assignment}/{name} is out of date: run `make exercises`"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_task_has_an_answer_and_a_check_cell_worth_its_checks(assignment):
    exercise = get_exercise(assignment)
    with open(os.path.join(ROOT, "solutions", assignment, f"{assignment}.ipynb")) as f:
        cells = json.load(f)["cells"]
    meta = {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in cells}
    for task in exercise.tasks:
        assert f"{task}_answer" in meta, f"no answer cell for {task}"
        check_cell = meta.get(f"{task}_check")
        assert check_cell is not None, f"no check cell for {task}"
        points = sum(c.points for c in exercise.checks_for(task))
        assert check_cell["metadata"]["nbgrader"]["points"] == points, f"{task}: cell points != checks' points"
        assert f'check("{task}")' in "".join(check_cell["source"])
