"""Every English lesson's code cells stay short enough to read: none over 40 lines unless it is a
`%%writefile` script, and none that draws over 10 lines, so a figure is one call of a grader.lessons helper
next to the computation it shows.

A cell draws when it uses matplotlib (`plt`, `fig`, `ax`, `.plot(`, `.bar(`, ...) or calls a drawing helper of
grader.lessons. Which helpers draw is read from their source (a function that uses matplotlib, or calls one
that does), so a new figure helper is covered without being listed here. Lines are the cell's source lines."""

import ast
import glob
import json
import os
import re

import pytest

from tests.helpers import ROOT

LESSONS = sorted(glob.glob(os.path.join(ROOT, "lessons", "lesson_0*.ipynb")))
HELPERS = sorted(glob.glob(os.path.join(ROOT, "grader", "lessons", "*.py")))
MAX_LINES, MAX_DRAWING_LINES = 40, 10
MATPLOTLIB_NAMES = {"plt", "fig", "ax", "axes", "matplotlib"}  # what a cell that draws by hand touches
DRAWING_METHODS = {"plot", "bar", "barh", "imshow", "scatter", "subplots", "savefig"}


def _matplotlib_aliases(tree):
    """Names a module or cell binds to matplotlib (`import matplotlib.pyplot as plt` binds plt)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("matplotlib")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("matplotlib"):
            names |= {a.asname or a.name for a in node.names}
    return names


def _names_used(node):
    """Every name node reads inside node, the functions it calls among them."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def drawing_helpers(paths=HELPERS):
    """{module name: names of its functions that draw}: a function draws if it reads a matplotlib name, or
    calls a function of the same module that draws (a private `_schedule(ax, ...)` drawn into by its caller)."""
    found = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        aliases = _matplotlib_aliases(tree) | {"matplotlib"}
        functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        draws = {name for name, fn in functions.items() if _names_used(fn) & aliases or _matplotlib_aliases(fn)}
        while True:  # callers of drawing functions draw too
            more = {name for name, fn in functions.items() if name not in draws and _names_used(fn) & draws}
            if not more:
                break
            draws |= more
        found[os.path.basename(path)[: -len(".py")]] = draws
    return found


def _python(source):
    """The cell as Python: IPython's line magics and shell escapes become `pass`, keeping the indentation."""
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.splitlines())


def _lesson_imports(trees, helpers):
    """What the notebook's imports bind: {alias: module} for grader.lessons modules, and the drawing
    functions imported by name (`from grader.lessons.trace import timeline`)."""
    modules, functions = {}, set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "grader.lessons":
                modules.update({a.asname or a.name: a.name for a in node.names if a.name in helpers})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grader.lessons."):
                module = node.module.rsplit(".", 1)[1]
                functions |= {a.asname or a.name for a in node.names if a.name in helpers.get(module, ())}
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("grader.lessons.") and a.asname:
                        modules[a.asname] = a.name.rsplit(".", 1)[1]
    return modules, functions


def cell_draws(tree, modules, functions, helpers, matplotlib_names):
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in matplotlib_names | functions:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, name = node.func.value, node.func.attr
            if isinstance(owner, ast.Name) and name in helpers.get(modules.get(owner.id), ()):
                return True  # plots.collectives(demo)
            if name in DRAWING_METHODS and not (isinstance(owner, ast.Name) and owner.id in modules):
                return True  # something.plot(...), something.bar(...)
    return False


def offenders(cells, helpers=None):
    """(code cell number, lines, draws, first line) of each code cell over its limit, given the notebook's
    cells as nbformat dicts."""
    helpers = drawing_helpers() if helpers is None else helpers
    code = [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in cells
        if c["cell_type"] == "code"
    ]
    trees = []
    for number, source in enumerate(code, 1):
        try:
            trees.append(ast.parse(_python(source)) if not source.startswith("%%") else ast.Module([], []))
        except SyntaxError as e:
            raise AssertionError(f"code cell {number} is not Python the check can read: {e}") from e
    modules, functions = _lesson_imports(trees, helpers)
    matplotlib_names = MATPLOTLIB_NAMES.union(*(_matplotlib_aliases(t) for t in trees))
    found = []
    for number, (source, tree) in enumerate(zip(code, trees), 1):
        lines = len(source.splitlines())
        writefile = source.startswith("%%writefile")  # a script the lesson runs, shown whole on purpose
        draws = cell_draws(tree, modules, functions, helpers, matplotlib_names)
        if (lines > MAX_LINES and not writefile) or (draws and lines > MAX_DRAWING_LINES):
            found.append((number, lines, draws, source.splitlines()[0]))
    return found


@pytest.mark.parametrize("path", LESSONS, ids=os.path.basename)
def test_no_code_cell_over_40_lines_and_no_drawing_cell_over_10(path):
    with open(path, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    found = offenders(cells)
    assert not found, f"{os.path.basename(path)}: " + "; ".join(
        f"code cell {n} has {lines} lines{' and draws (limit 10)' if draws else ' (limit 40)'}: {first!r}"
        for n, lines, draws, first in found
    )


def test_the_drawing_helpers_are_read_from_grader_lessons():
    helpers = drawing_helpers()
    assert {"collectives", "allreduce_cost", "elastic_lanes", "gpipe_schedules"} <= helpers["plots_lessons_1_4"]
    assert "backward_timeline" in helpers["plots"] and "sync_strategies" in helpers["plots_practice"]
    assert {"checkpoint_peaks", "fsdp_timeline"} <= helpers["plots_memory"]
    assert "expert_traffic" in helpers["plots_moe"] and "_loads" in helpers["plots_moe"], "drawn into by its caller"
    assert "timeline" in helpers["trace"] and "lanes" not in helpers["trace"], "trace.lanes only reads a file"
    assert not helpers["notebook_torchrun"] and not helpers["show"] and not helpers["timing"]


def _cell(source):
    return {"cell_type": "code", "source": source}


def test_the_limits_can_fail():
    imports = _cell(
        "import matplotlib.pyplot as pyplot\nfrom grader.lessons import plots_lessons_1_4 as plots\n"
        "from grader.lessons import trace\nfrom grader.lessons.notebook_torchrun import run"
    )
    filler = "x = 1\n" * 9
    cells = [
        imports,
        _cell(filler + "plots.collectives(demo)"),  # 10 lines, draws: allowed
        _cell(filler + "x = 2\nplots.collectives(demo)"),  # 11 lines, draws through a helper
        _cell(filler + "x = 2\nfig = pyplot.figure()"),  # 11 lines, draws with matplotlib by hand
        _cell(filler + "x = 2\ntrace.lanes(path)"),  # 11 lines, reads a trace: not drawing
        _cell(filler + "x = 2\nrun(['--standalone'])"),  # 11 lines, launches: not drawing
        _cell("%%writefile train.py\n" + "x = 1\n" * 60),  # a script: exempt
        _cell("x = 1\n" * 41),  # too long
        _cell("%time y = 2\n" + "x = 1\n" * 40),
    ]  # a line magic counts as a line
    assert [(n, lines, draws) for n, lines, draws, _ in offenders(cells)] == [
        (3, 11, True),
        (4, 11, True),
        (8, 41, False),
        (9, 41, False),
    ]
    assert offenders([_cell(filler + "x = 2\nax.bar([1], [2])")])[0][2], "a cell that draws on an axis"
