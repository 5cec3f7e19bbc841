"""The maps are true: every module of grader/ is named in its package's docstring or in docs/architecture.md
(an exercise package's hidden_*.py, hints.py and reference.py are found by convention, CONTRIBUTING.md), and every
file the architecture's "life of a check" names exists; each exercise package's table names, for every checks_*.py
module, the tasks whose public checks it holds (a task's checks are found from its name)."""

from __future__ import annotations

import ast
import os
import re

from tests.helpers import ROOT

CONVENTIONAL = ("hidden_", "hints.py", "reference.py")  # in an exercise's package: found by the registry's rules


def package_docstring(folder: str) -> str:
    with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


def test_every_module_is_on_a_map():
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        architecture = f.read()
    unmapped = []
    for folder, _, files in os.walk(os.path.join(ROOT, "grader")):
        if "__init__.py" not in files or "locale" in folder.split(os.sep):
            continue
        docstring = package_docstring(folder)
        relative = os.path.relpath(folder, ROOT)
        in_exercise = relative.startswith(os.path.join("grader", "exercises") + os.sep)
        for name in sorted(files):
            if not name.endswith(".py") or name == "__init__.py":
                continue
            if in_exercise and name.startswith(CONVENTIONAL):
                continue
            pattern = re.compile(r"(?<!\w)" + re.escape(name) + r"\b")
            if not pattern.search(docstring) and not pattern.search(architecture):
                unmapped.append(os.path.join(relative, name))
    assert not unmapped, "name these in their package's docstring or docs/architecture.md: " + ", ".join(unmapped)


def test_the_life_of_a_check_names_files_that_exist():
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    life = text[text.index("## The life of a check") :]
    life = life[: life.index("\n## ")] if "\n## " in life else life
    paths = re.findall(r"`(grader/[\w/]+\.py)`", life)
    assert len(paths) >= 15, paths
    missing = [p for p in paths if not os.path.isfile(os.path.join(ROOT, p))]
    assert not missing, missing


def check_table(docstring: str) -> dict[str, str]:
    """An exercise package's table of its checks: `    checks_<topic>.py  task, task (what else)`, a row's
    continuation lines indented deeper; module -> the row's text."""
    rows: dict[str, str] = {}
    current = None
    for line in docstring.splitlines():
        row = re.match(r" {4}(checks_\w+\.py)\s+(.*)", line)
        if row:
            current = row.group(1)
            rows[current] = row.group(2)
        elif current and line.startswith(" " * 8):
            rows[current] += " " + line.strip()
        else:
            current = None
    return rows


def tasks_named(text: str, tasks: list[str]) -> set[str]:
    return {t for t in tasks if re.search(r"(?<![\w.])" + re.escape(t) + r"(?!\w|\.py)", text)}


def test_each_exercise_names_the_module_of_each_tasks_checks():
    """A task's public checks are found from its name: its exercise package's docstring has a row per checks
    module naming the tasks it holds, kept true here against the checks the exercise declares."""
    from grader.exercises import discover, get_exercise

    wrong = []
    for exercise_id, found in discover().items():
        exercise = get_exercise(exercise_id)
        held: dict[str, set[str]] = {}
        for check in exercise.checks_for(hidden=False):
            held.setdefault(check.fn.__module__.rpartition(".")[2] + ".py", set()).add(check.task)
        table = check_table(package_docstring(found.folder))
        for module in sorted(set(held) | set(table)):
            named = tasks_named(table.get(module, ""), exercise.tasks)
            if named != held.get(module, set()):
                wrong.append(
                    f"{exercise_id}: the row `{module}` names {sorted(named) or 'no task'}; "
                    f"it holds the checks of {sorted(held.get(module, set())) or 'no task'}"
                )
    assert not wrong, "fix the table in the exercise package's docstring:\n" + "\n".join(wrong)


def test_the_check_table_can_fail():
    table = check_table(
        '"""x\n\n    checks_a.py  one, two (not three.py)\n        and four\n    checks_b.py  five\n"""'
    )
    assert table == {"checks_a.py": "one, two (not three.py) and four", "checks_b.py": "five"}
    assert tasks_named(table["checks_a.py"], ["one", "two", "three", "four", "five"]) == {"one", "two", "four"}
