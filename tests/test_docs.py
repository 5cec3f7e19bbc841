"""The README is one screen with links, and every file, make target and grader command that the README, docs/ and
CONTRIBUTING.md name exists, so a renamed module or target cannot leave the docs pointing nowhere. The README's
course table lists every exercise the grader discovers, so a fifth exercise cannot go missing from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.cli import build_parser
from grader.exercises import exercise_ids
from tests.helpers import ROOT

ROOT_PATH = Path(ROOT)
PAGES = [ROOT_PATH / "README.md", ROOT_PATH / "CONTRIBUTING.md", *sorted((ROOT_PATH / "docs").glob("*.md"))]
TOP = (
    "grader",
    "tests",
    "lessons",
    "solutions",
    "exercises",
    "deploy",
    "benchmarks",
    "samples",
    "locale",
    "translated",
    "docs",
    ".ci",
)
PATH = re.compile(r"`((?:%s)/[^`\s]*)`" % "|".join(re.escape(t) for t in TOP))
LINK = re.compile(r"\]\(([^)#\s]+)")
MAKE = re.compile(r"(?:`|^)make ([a-z][a-z-]*)", re.M)  # in code, not the prose verb
GRADER = re.compile(r"python -m grader ([a-z][a-z-]*)")
ONLY_IN_A_BUILD = {"grader/STUDENT_BUILD", "deploy/hub/node_modules"}  # made by make student, by npm ci (make hub)
ILLUSTRATIVE = ("<", "*", "{", "...", "…", "my_topic", "my_task", "05_", "NN_", "$")  # placeholders, examples


def named_paths(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    found = {m.rstrip(".,:;") for m in PATH.findall(text)}
    found |= {
        str((page.parent / m).resolve().relative_to(ROOT_PATH))
        for m in LINK.findall(text)
        if "://" not in m and not m.startswith("mailto:")
    }
    return {p for p in found if not any(mark in p for mark in ILLUSTRATIVE)} - ONLY_IN_A_BUILD


def test_the_readme_is_one_screen_and_links_every_docs_page():
    readme = (ROOT_PATH / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 120, "the README grew past one screen: move the detail into docs/"
    for page in sorted((ROOT_PATH / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"docs/{page.name} is not linked from the README"


def test_the_course_table_lists_every_exercise():
    readme = (ROOT_PATH / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if re.match(r"\| \d+ \|", line)]
    listed = [m.group(1) for line in rows for m in [re.search(r"`(\d\d_\w+)`", line)] if m]
    assert listed == exercise_ids(), f"the README's course table lists {listed}, the grader has {exercise_ids()}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT_PATH)))
def test_every_file_a_page_names_exists(page):
    missing = sorted(p for p in named_paths(page) if not (ROOT_PATH / p).exists())
    assert not missing, f"{page.relative_to(ROOT_PATH)} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT_PATH)))
def test_every_make_target_and_grader_command_a_page_names_exists(page):
    text = page.read_text(encoding="utf-8")
    makefile = (ROOT_PATH / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    unknown = sorted(set(MAKE.findall(text)) - targets)
    assert not unknown, f"{page.relative_to(ROOT_PATH)} names make targets the Makefile lacks: {unknown}"
    commands = set(next(a for a in build_parser()._subparsers._group_actions).choices)  # noqa: SLF001
    unknown = sorted(set(GRADER.findall(text)) - commands)
    assert not unknown, f"{page.relative_to(ROOT_PATH)} names grader commands that do not exist: {unknown}"


def test_code_cites_no_issue_numbers():
    """The tracker is not in the repository: a comment says why, not which issue asked for it."""
    cited = re.compile(r"\b[Ii]ssues? \d+")
    found = [
        f"{path.relative_to(ROOT_PATH)}:{n}"
        for top in ("grader", "tests", "benchmarks", "deploy/hub", "deploy/lab")
        for path in sorted((ROOT_PATH / top).rglob("*.py"))
        if "node_modules" not in path.parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if cited.search(line)
    ]
    assert not found, f"issue numbers in code: {found[:5]}"
