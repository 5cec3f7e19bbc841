"""grader/ is layered: every import points down (or stays in its layer), and no module imports itself
back through others ("engine → seam → runner → exercises → student → course → instructor → commands").

From the bottom, the core (every audience's) first, then one layer per audience:

  0 engine      grader.engine.* and the `grader` package (it only re-exports run_distributed): starts ranks,
                bounds waits, collects results; knows no check and no exercise (whoever starts the
                forkserver names what it preloads). grader.i18n (the grader's text in the student's
                language) sits here too: every layer, the engine's hardware-plan line included, speaks through it.
  1 seam        grader.checks (checks and results, declared), grader.grading (`g.run`, the one seam between a
                check and the student's code), grader.shared_runs (the launches g.run shares between the checks
                of a submission), grader.submission (reading answers), grader.tolerances,
                grader.cells (nbgrader's cell metadata), grader.feedback_filter (what a result may say).
  2 runner      grader.runner: run_checks, the one check runner; grader.reasons (one reason per mistake).
  3 exercises   grader.exercises.*: the exercises, their checks and references, the shared check helpers;
                grader.code_digest (one digest of the code that grades an exercise).
  4 student     what students call: grader.notebook.* (check(), hint()), grader.progress.*, grader.lessons.*.
  5 course      what builds the course: grader.course.* (points, scaffold, student build), grader.translate.*.
                It may use what students call (never the other way: a student's code needs no builder).
  6 instructor  what instructors run: grader.instructor.* (selfcheck, gpucheck, demo), grader.gradebook.*,
                grader.isolation.*.
  7 commands    the door for everyone: grader.cli (with answers_reachable, its notice) and __main__.

Within a layer any import is allowed, but no circle (anywhere). A new top-level grader module must be
placed in LAYERS; one under a listed package (grader.engine., grader.exercises., ...) is placed already.
"""

from __future__ import annotations

import pytest

from tests.grader_imports import Import, all_imports, grader_edges, grader_modules, imports_of

ENGINE, SEAM, RUNNER, EXERCISES, STUDENT, COURSE, INSTRUCTOR, COMMANDS = range(8)
NAMES = ["engine", "seam", "runner", "exercises", "student", "course", "instructor", "commands"]
LAYERS = {  # a module, or a package (all its modules): the longest match decides
    "grader": ENGINE,  # the package itself: `from grader import run_distributed`
    "grader.i18n": ENGINE,
    "grader.settings": ENGINE,  # a table with no imports: anything may read it
    "grader.engine": ENGINE,
    "grader.checks": SEAM,
    "grader.grading": SEAM,
    "grader.submission": SEAM,
    "grader.tolerances": SEAM,
    "grader.cells": SEAM,
    "grader.feedback_filter": SEAM,
    "grader.shared_runs": SEAM,
    "grader.runner": RUNNER,
    "grader.reasons": RUNNER,
    "grader.code_digest": EXERCISES,
    "grader.exercises": EXERCISES,
    "grader.notebook": STUDENT,
    "grader.progress": STUDENT,
    "grader.lessons": STUDENT,
    "grader.course": COURSE,
    "grader.translate": COURSE,
    "grader.instructor": INSTRUCTOR,
    "grader.gradebook": INSTRUCTOR,
    "grader.isolation": INSTRUCTOR,
    "grader.cli": COMMANDS,
    "grader.answers_reachable": COMMANDS,
    "grader.__main__": COMMANDS,
}
PACKAGES = (
    "grader.engine",
    "grader.exercises",
    "grader.notebook",
    "grader.progress",
    "grader.lessons",
    "grader.course",
    "grader.translate",
    "grader.instructor",
    "grader.gradebook",
    "grader.isolation",
)


def layer_of(module: str) -> int | None:
    if module in LAYERS:
        return LAYERS[module]
    package = next((p for p in PACKAGES if module.startswith(p + ".")), None)
    return LAYERS[package] if package else None


def upward(edges: set[tuple[str, str]]) -> list[str]:
    """Each import that points to a higher layer, in words."""
    return sorted(
        f"{a} ({NAMES[layer_of(a)]}) imports {b} ({NAMES[layer_of(b)]})"
        for a, b in edges
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)
    )


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def edges():
    modules = grader_modules()
    return grader_edges(all_imports(), set(modules))


def test_every_grader_module_has_a_layer():
    unplaced = sorted(m for m in grader_modules() if layer_of(m) is None)
    assert not unplaced, f"place these modules in tests/test_layers.py's LAYERS (and its docstring): {unplaced}"


def test_no_import_points_up(edges):
    assert not upward(edges), "imports against the layers:\n" + "\n".join(upward(edges))


def test_no_import_circle(edges):
    assert not circles(edges), f"modules that import each other: {circles(edges)}"


def test_the_walk_sees_the_layers_as_written(edges):
    """The walk is not vacuous: it sees the known downward imports, lazy ones inside functions included."""
    assert ("grader.runner", "grader.checks") in edges
    assert ("grader.cli", "grader.runner") in edges
    assert ("grader.grading", "grader.engine") in edges
    assert any(a.startswith("grader.exercises.") and b == "grader.checks" for a, b in edges)
    assert len(edges) > 100


def test_an_import_up_or_a_circle_is_caught():
    """What the checks above would say if the old back door came back: checks.py re-exporting the runner."""
    modules = set(grader_modules())
    old_checks = "from grader.grading import describe_failure\nfrom grader.runner import run_checks\n"
    planted = grader_edges(imports_of("grader.checks", old_checks), modules)
    assert planted == {("grader.checks", "grader.grading"), ("grader.checks", "grader.runner")}
    assert upward(planted) == ["grader.checks (seam) imports grader.runner (runner)"]
    runner = grader_edges(imports_of("grader.runner", "from grader.checks import Report\n"), modules)
    assert circles(planted | runner) == [["grader.checks", "grader.runner"]]
    lazy = imports_of("grader.engine.launcher", "def f():\n    from ..exercises import get_exercise\n")
    assert lazy == [Import("grader.engine.launcher", "grader.exercises", "get_exercise", 2)]
    assert upward(grader_edges(lazy, modules)) == [
        "grader.engine.launcher (engine) imports grader.exercises (exercises)"
    ]
