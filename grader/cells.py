"""nbgrader's cell conventions in this course, in one place.

Every task of an exercise notebook has two cells:
- `<task>_answer`: a code cell with nbgrader `solution: true` (and not graded):
  the student's answer, the only cells the grader executes;
- `<task>_check`: a graded, locked code cell calling `check("<task>")`, worth
  the sum of its task's check points (`points`), with the hidden checks'
  call between `### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS`.

Works on plain dicts (json.load) and nbformat nodes alike; never imports nbgrader.
"""

from __future__ import annotations

import hashlib
import json

ANSWER, CHECK = "_answer", "_check"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def nbgrader_meta(cell) -> dict:
    return (cell.get("metadata", {}) or {}).get("nbgrader", {}) or {} if isinstance(cell, dict) else {}


def source(cell) -> str:
    text = cell.get("source", "") if isinstance(cell, dict) else ""
    return "".join(text) if isinstance(text, list) else str(text)


def grade_id(cell) -> str:
    return str(nbgrader_meta(cell).get("grade_id", "") or "")


def is_answer_cell(cell) -> bool:
    """A code cell the student writes in: nbgrader solution, not a graded test."""
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("solution")) and not meta.get("grade")


def is_check_cell(cell) -> bool:
    return cell.get("cell_type") == "code" and grade_id(cell).endswith(CHECK)


def task_of(cell) -> str | None:
    """The task an answer or check cell belongs to, from its grade id."""
    gid = grade_id(cell)
    for suffix in (ANSWER, CHECK):
        if gid.endswith(suffix) and (suffix == CHECK or is_answer_cell(cell)):
            return gid[: -len(suffix)]
    return None


def answer_cells(cells: list) -> dict[str, dict]:
    """task -> its answer cell."""
    return {task_of(c): c for c in cells if isinstance(c, dict) and is_answer_cell(c) and task_of(c)}


def check_cells(cells: list) -> dict[str, dict]:
    """task -> its check cell."""
    return {task_of(c): c for c in cells if isinstance(c, dict) and is_check_cell(c)}


def check_points(cell) -> float:
    return float(nbgrader_meta(cell).get("points", 0) or 0)


def hidden_region(cell) -> str | None:
    """The source between the hidden-tests markers, or None when the cell has none."""
    text = source(cell)
    if HIDDEN_BEGIN not in text or HIDDEN_END not in text:
        return None
    return text.split(HIDDEN_BEGIN, 1)[1].split(HIDDEN_END, 1)[0]


def untouched(cell) -> bool:
    """The answer cell still holds the released stub: nbgrader's checksum of it is unchanged."""
    meta = nbgrader_meta(cell)
    if "checksum" not in meta:
        return False  # no release checksum (a solution notebook): count it as an answer
    m = hashlib.md5()
    # nbgrader.utils.compute_checksum for an answer cell (solution, not graded, not locked), without
    # importing nbgrader (seconds): source, type, is_grade, is_solution, is_locked, grade_id.
    for part in (source(cell), "code", "False", "True", "False", meta["grade_id"]):
        m.update(part.encode("utf-8"))
    return m.hexdigest() == meta["checksum"]


def read_cells(path: str) -> list:
    """The cells of a notebook file (ValueError when it is not one)."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise ValueError(f"{path} is not a notebook: it has no list of cells")
    return cells


def output_text(cell) -> str:
    """What a cell's outputs show as text: streams, and the text/plain of results and displays
    (check() writes a display that it updates in place)."""
    parts = []
    for out in cell.get("outputs", []) if isinstance(cell, dict) else []:
        if not isinstance(out, dict):
            continue
        if out.get("output_type") == "stream":
            text = out.get("text", "")
        else:
            text = (out.get("data") or {}).get("text/plain", "")
        parts.append("".join(text) if isinstance(text, list) else str(text))
    return "\n".join(parts)
