"""No task's answer can be copied from a lesson: the lessons teach the idea, the exercises ask for a design.

Every block between `### BEGIN SOLUTION` and `### END SOLUTION` of a solution notebook is compared with the code
cells of every lesson (lessons/*.ipynb, the source language; the translated copies share their code). Both sides
are reduced to their meaningful lines: comments and blank lines dropped, whitespace collapsed. A task fails when
SHARED consecutive meaningful lines of its answer, none of them trivial (a bare `return x`, `else:`, a closing
bracket), appear consecutively in one lesson cell; an answer block shorter than SHARED lines fails when all of it
does (a one-line answer copied whole is still copied).
"""

import glob
import json
import os
import re

import pytest

from grader import cells
from tests.helpers import ROOT

SHARED = 3  # consecutive lines: one or two may coincide by idiom, three are a copied recipe
TRIVIAL_BELOW = 16  # characters: a normalized line shorter than this says nothing of a design
SOLUTION_BLOCK = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
# Answers that still copy a lesson, owned by the exercise's maintainers; strict: a fix turns the entry into a
# failure until it is removed here.
KNOWN_COPIES: set[str] = set()


def meaningful_lines(code: str) -> list[str]:
    lines = []
    for line in code.splitlines():
        line = re.sub(r"\s+#.*$", "", line)  # a trailing comment; a quoted '#' is rare and only shortens the line
        line = " ".join(line.split())
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def runs(lines: list[str], length: int = SHARED) -> set[tuple[str, ...]]:
    """Every window of `length` consecutive lines none of which is trivial."""
    return {
        tuple(lines[i : i + length])
        for i in range(len(lines) - length + 1)
        if all(len(line) >= TRIVIAL_BELOW for line in lines[i : i + length])
    }


def answer_runs(blocks: list[list[str]]) -> set[tuple[str, ...]]:
    """The runs a lesson must not contain: SHARED-line windows of each block, or, for an answer shorter than
    SHARED lines in all, the whole answer."""
    whole = [line for block in blocks for line in block]
    if len(whole) < SHARED:
        return runs(whole, len(whole)) if whole else set()
    return {run for block in blocks for run in runs(block)}


def solution_blocks() -> dict[str, list[list[str]]]:
    """Task (exercise/grade id) -> the meaningful lines of each of its solution blocks."""
    found: dict[str, list[list[str]]] = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "solutions", "*", "*.ipynb"))):
        exercise = os.path.basename(os.path.dirname(path))
        for cell in cells.read_cells(path):
            if cell.get("cell_type") != "code":
                continue
            for block in SOLUTION_BLOCK.findall(cells.source(cell)):
                task = cells.task_of(cell) or cells.grade_id(cell) or "(unnamed cell)"
                found.setdefault(f"{exercise}/{task}", []).append(meaningful_lines(block))
    return found


def lesson_runs() -> dict[tuple[str, ...], str]:
    """Every non-trivial run of a lesson code cell -> where it is (lesson file, cell id)."""
    where: dict[tuple[str, ...], str] = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "lessons", "*.ipynb"))):
        with open(path, encoding="utf-8") as file:
            notebook = json.load(file)
        for index, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] == "code":
                for length in range(1, SHARED + 1):  # shorter runs: for answers shorter than SHARED lines
                    for run in runs(meaningful_lines(cells.source(cell)), length):
                        where.setdefault(run, f"{os.path.basename(path)} cell {cell.get('id', index)}")
    return where


SOLUTIONS = solution_blocks()
LESSONS = lesson_runs()


def test_every_task_of_every_exercise_is_compared():
    # each task the grader knows has an answer block scanned here, and none is exempt from the comparison
    from grader.exercises import get_exercise

    for exercise in sorted({task.split("/")[0] for task in SOLUTIONS}):
        tasks = set(get_exercise(exercise).tasks)
        scanned = {task.split("/", 1)[1] for task in SOLUTIONS if task.startswith(exercise + "/")}
        assert tasks <= scanned, (exercise, sorted(tasks - scanned))
    assert not KNOWN_COPIES


def test_the_scan_sees_every_exercise_and_lesson():
    exercises = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "solutions", "*")) if os.path.isdir(p)}
    assert {task.split("/")[0] for task in SOLUTIONS} == exercises
    assert len(glob.glob(os.path.join(ROOT, "lessons", "*.ipynb"))) >= 4 and LESSONS


@pytest.mark.parametrize(
    "task",
    [
        pytest.param(task, marks=pytest.mark.xfail(strict=True, reason="known copy")) if task in KNOWN_COPIES else task
        for task in sorted(SOLUTIONS)
    ],
)
def test_no_answer_is_a_block_of_a_lesson(task):
    copied = sorted((LESSONS[run], run) for run in answer_runs(SOLUTIONS[task]) if run in LESSONS)
    assert not copied, (
        f"{task}: {len(copied)} runs of consecutive lines of its answer are in a lesson, first in "
        f"{copied[0][0]}:\n" + "\n".join(copied[0][1])
    )


def test_the_comparison_finds_a_copy_and_ignores_layout_and_comments():
    answer = meaningful_lines("x = torch.zeros(3)  # start\n\ndist.all_reduce(x, op=SUM)\n  y = compute_the_thing(x)\n")
    lesson = meaningful_lines(
        "# copied\nx  =  torch.zeros(3)\ndist.all_reduce(x, op=SUM)   # sum\ny = compute_the_thing(x)"
    )
    assert runs(answer) and runs(answer) <= runs(lesson)
    assert not runs(meaningful_lines("return x\nelse:\n    pass\n"))  # idioms alone are no copy
    one_liner = meaningful_lines("return parallelize_module(mlp, mesh, plan)")
    assert answer_runs([one_liner]) == {tuple(one_liner)}  # a short answer is compared whole
    assert tuple(one_liner) not in answer_runs(
        [one_liner, answer]
    )  # a long answer's one-line block is not (an idiom, such as view_as)
