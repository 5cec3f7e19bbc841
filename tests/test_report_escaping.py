"""`make report` writes what students wrote as text: a failure message or a flag holding raw HTML or Markdown
(an `<img src=…>` that would load a URL when the report is viewed, a Markdown image, a table's `|`) is escaped."""

from __future__ import annotations

import re

from grader.exercises import get_exercise
from grader.gradebook.report import markdown_lines, summarize
from tests.graded_class import A

PLANTED = "<img src=http://attacker.example/x.png> ![seen](http://attacker.example/y.png) a | b"


def _result(student: str, message: str, flags: list[str]) -> dict:
    checks = [
        {"name": c.name, "task": c.task, "passed": False, "points": 0, "max_points": c.points, "message": message}
        for c in get_exercise(A).checks
    ]
    return {"student": student, "flags": flags, "report": {"checks": checks, "score": 0}}


def test_student_text_is_inert_in_the_markdown_report():
    results = [_result("<b>mallory</b>", PLANTED, [f"the notebook shows {PLANTED}"])]
    md = "\n".join(markdown_lines(A, results, summarize(A, results)))
    assert "<img" not in md and "<b>" not in md, md
    assert not re.search(r"(?<!\\)!(?=\[)|(?<!\\)\]\(", md), md  # no Markdown image or link left unescaped
    assert "&lt;img src=http://attacker.example/x.png&gt;" in md
    table = [line for line in md.splitlines() if line.startswith("| ") and "attacker" in line]
    assert table and all(line.count(" | ") == 3 for line in table), table  # the student's | is not a column
