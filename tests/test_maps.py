"""The maps are true: every module of grader/ is named in its package's docstring or in docs/architecture.md
(an exercise package's hidden_*.py, hints.py and reference.py are found by convention, CONTRIBUTING.md), and every
file the architecture's "life of a check" names exists."""

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
