"""One digest of everything that grades an exercise (grader/code_digest.py).

What a grading run really loads is measured in a fresh interpreter (the exercise loaded, a real
check run); the digest must cover all of it. In a copy of the grader, changing any shared module
changes the digest of exactly the exercises that load it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from grader import code_digest
from grader.code_digest import grader_digest, loaded_modules
from grader.exercises import discover, exercise_ids
from tests.helpers import ROOT

GRADER = os.path.join(ROOT, "grader")
SHARED = sorted(n for n in os.listdir(os.path.join(GRADER, "exercises")) if n.endswith(".py") and n != "__init__.py")

LOADED = """
import json, sys
from grader.exercises import get_exercise
from grader.runner import run_checks
from grader.submission import read_notebook
exercise = get_exercise(sys.argv[1])
if sys.argv[2:]:  # one real check run: what the runner imports lazily counts too
    first = exercise.tasks[0]
    run_checks(exercise, read_notebook(exercise.notebook), task=first, hidden=False)
print(json.dumps(sorted(m for m in sys.modules if m == "grader" or m.startswith("grader."))))
"""


@pytest.fixture(scope="module")
def runtime() -> dict[str, set[str]]:
    """exercise id -> the grader modules an interpreter holds once it loaded the exercise (the first
    exercise also ran a real check), minus what only discovery imports (the other declarations)."""
    found = discover()
    seen = {}
    for i, exercise_id in enumerate(found):
        args = [sys.executable, "-c", LOADED, exercise_id] + (["run"] if i == 0 else [])
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        others = {p.package for e, p in found.items() if e != exercise_id}
        seen[exercise_id] = set(json.loads(done.stdout.strip().splitlines()[-1])) - others
    return seen


def test_the_digest_covers_every_grader_module_a_run_loads(runtime):
    for exercise_id, modules in runtime.items():
        missing = modules - set(loaded_modules(exercise_id))
        assert not missing, f"{exercise_id}: loaded by a grading run but not in its digest: {sorted(missing)}"


@pytest.fixture()
def copy(tmp_path, monkeypatch):
    """The grader as it is, copied; the digest reads the copy."""
    target = tmp_path / "grader"
    shutil.copytree(GRADER, target, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code_digest, "_GRADER", str(target))
    return target


def _digests() -> dict[str, str]:
    return {e: grader_digest(e) for e in exercise_ids()}


def _changed(copy, relative: str, text: str = "\n# changed\n") -> set[str]:
    before = _digests()
    path = copy / relative
    original = path.read_bytes() if path.exists() else None
    with open(path, "a") as f:
        f.write(text)
    try:
        after = _digests()
    finally:
        path.unlink() if original is None else path.write_bytes(original)
    assert _digests() == before
    return {e for e in before if before[e] != after[e]}


@pytest.mark.parametrize("name", SHARED)
def test_changing_a_shared_module_changes_the_digest_of_exactly_its_users(copy, runtime, name):
    module = f"grader.exercises.{name[:-3]}"
    users = {e for e, modules in runtime.items() if module in modules}
    assert users, f"{module} is loaded by no exercise's grading run"
    assert _changed(copy, f"exercises/{name}") == users


def test_what_grades_every_exercise_is_in_every_digest(copy):
    everyone = set(exercise_ids())
    for relative in (
        "runner.py",
        "grading.py",
        "tolerances.py",
        "submission.py",
        "checks.py",
        "engine/worker.py",
        "engine/preload.py",
        "exercises/__init__.py",
    ):
        assert _changed(copy, relative) == everyone, relative


def test_code_no_grading_run_loads_leaves_every_digest(copy):
    assert _changed(copy, "exercises/unused_helper.py", "X = 1\n") == set()
    assert _changed(copy, "cli.py") == set()


def test_an_exercise_s_own_module_changes_only_its_digest(copy):
    for exercise_id, found in discover().items():
        for module in (found.public[0], found.hidden[0]):
            relative = os.path.relpath(os.path.join(found.folder, module.rpartition(".")[2] + ".py"), GRADER)
            assert _changed(copy, relative) == {exercise_id}, module
