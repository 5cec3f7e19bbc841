"""The lesson notebooks as committed: outputs free of the executing machine's paths and run timestamps,
a linked table of contents, figures drawn by grader.lessons.plots, the Quick Check shipped unanswered."""

import glob
import json
import os
import re
import sys
import tempfile

import pytest

from grader.lessons import quiz
from tests.helpers import ROOT

LESSONS = sorted(glob.glob(os.path.join(ROOT, "lessons", "*.ipynb")))
# Parts of absolute paths that only the machine that ran a lesson has, and a run's date and time.
MACHINE_PATHS = re.compile(r"/work/|/root/|/home/|/tmp/|/var/folders/|\.venv|site-packages|[A-Z]:\\\\Users")
TIMESTAMP = re.compile(r"\b20\d\d-\d\d-\d\d[ T_]\d\d:\d\d|^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}", re.MULTILINE)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def output_text(cell):
    return json.dumps(cell.get("outputs", []), ensure_ascii=False)


def this_machine():
    """This machine's own folders, whatever they are called (the checkout, the interpreter, temp, home)."""
    return {
        p for p in (ROOT, sys.prefix, os.path.realpath(tempfile.gettempdir()), os.path.expanduser("~")) if len(p) > 4
    }


def test_the_lessons_are_found():
    assert [os.path.basename(p)[:9] for p in LESSONS] == ["lesson_01", "lesson_02", "lesson_03", "lesson_04"]


@pytest.mark.parametrize("path", LESSONS, ids=os.path.basename)
def test_outputs_hold_no_absolute_path_of_the_machine_and_no_timestamp(path):
    nb = load(path)
    for i, cell in enumerate(nb["cells"]):
        text = "\n".join(
            o["text"] if isinstance(o.get("text", []), str) else "".join(o.get("text", []))
            for o in cell.get("outputs", [])
        ) + output_text(cell)
        assert not MACHINE_PATHS.search(text), f"cell {i}: {MACHINE_PATHS.search(text).group()!r} in its output"
        assert not TIMESTAMP.search(text), f"cell {i}: a run timestamp {TIMESTAMP.search(text).group()!r}"
        for folder in this_machine():
            assert folder not in text, f"cell {i}: this machine's {folder} in its output"
        assert "execution" not in cell.get("metadata", {}), f"cell {i}: execution timestamps in its metadata"


def test_the_path_check_can_fail():
    bad = {"outputs": [{"output_type": "stream", "text": "Writing /tmp/ddp-lesson-x1/train.py\n"}]}
    assert MACHINE_PATHS.search(output_text(bad))
    assert TIMESTAMP.search("[2026-11-30 20:01:23] started")
    assert TIMESTAMP.search("ok\nW1129 21:50:20.024000 23966 torch/distributed/elastic/api.py:1028] Sending")


@pytest.mark.parametrize("path", LESSONS, ids=os.path.basename)
def test_a_linked_table_of_contents_whose_links_resolve(path):
    cells = load(path)["cells"]
    markdown = "\n".join(source(c) for c in cells if c["cell_type"] == "markdown")
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', markdown))
    headings = re.findall(r'^<a id="s(\d+[a-z]?)"></a>\n## \1\. ', markdown, flags=re.MULTILINE)  # 6, 6b, 6c, 7
    assert len(headings) >= 5, "every numbered section heading carries its anchor"
    contents = source(cells[0])
    assert "**Contents**" in contents
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [link for link in links if re.fullmatch(r"s\d+[a-z]?", link)]  # a subsection's link may sit beside
    assert sections == [f"s{n}" for n in headings], "the table of contents lists every section, in order"
    for target in re.findall(r"\]\(#([^)]+)\)", markdown):
        assert target in anchors, f"a link to #{target}, which no heading carries"


@pytest.mark.parametrize("path", LESSONS, ids=os.path.basename)
def test_figures_are_one_call_to_grader_lessons_plots(path):
    for i, cell in enumerate(load(path)["cells"]):
        if cell["cell_type"] == "code":
            assert "plt." not in source(cell), f"cell {i} draws inline: move the figure to grader/lessons/plots.py"


@pytest.mark.parametrize("path", LESSONS, ids=os.path.basename)
def test_the_quick_check_ships_unanswered_and_checks_with_the_package(path):
    lesson = os.path.basename(path)[len("lesson_") : -len(".ipynb")]  # lesson_<id>.ipynb: its Quick Check is <id>
    cells = load(path)["cells"]
    answers = quiz.read_answers(path)
    assert answers == {q: "" for q in quiz.QUIZZES[lesson]}
    checks = [c for c in cells if c["cell_type"] == "code" and f'check("{lesson}", answers)' in source(c)]
    assert len(checks) == 1
    printed = "".join(
        o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"]) for o in checks[0]["outputs"]
    )
    assert "unanswered" in printed and "✓" not in printed, "the committed output is of an unanswered quiz"


def test_lesson_2_opens_with_the_ddp_recipe_linked_to_its_sections():
    cells = load(os.path.join(ROOT, "lessons", "lesson_02_ddp_basics.ipynb"))["cells"]
    box = source(cells[1])
    assert "DDP recipe" in box
    rows = [line for line in box.splitlines() if re.match(r"> \| \d+ \|", line)]
    assert 8 <= len(rows) <= 12
    assert all(re.search(r"\]\(#s\d+\)", row) for row in rows), "each line links to its section"
