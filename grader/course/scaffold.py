"""python -m grader new-exercise ID --task TASK: the files of a new exercise, ready to grade.

    grader/exercises/<name>/__init__.py          declares the exercise (found by convention, no registry line)
    grader/exercises/<name>/checks_<task>.py     one public check
    grader/exercises/<name>/hidden_<task>.py     one hidden check (never in a student build)
    grader/exercises/<name>/reference.py         the single-process references the checks compare with
    grader/exercises/<name>/hints.py             the task's ladder of hints (hint("task") in the notebook)
    solutions/<ID>/<ID>.ipynb                    the setup cell, the task's answer cell and check cell (nbgrader metadata)
    tests/exercises/test_<ID>.py                 full marks for the solution, nothing for the laziest answer

ID is `NN_name` (two digits, then a Python identifier in lower case); <name> is the package. The example
task sums a tensor over all ranks, so the new exercise grades as it stands (templates:
grader/course/scaffold_templates.py). Nothing that exists is overwritten: an id, a number, a package or a
file already there is refused before anything is written, and so is a task name that any exercise of the
course uses already (a student's notebook namespace and the hints are keyed by it).
`make exercises` then stamps the points, writes the release and the translation catalogs.
"""

from __future__ import annotations

import ast
import keyword
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grader import cells
from grader.course import scaffold_templates as t

if TYPE_CHECKING:
    import nbformat

ROOT = Path(__file__).resolve().parents[2]  # the course repository
ID = re.compile(r"^(?P<number>\d{2})_(?P<name>[a-z][a-z0-9_]*)$")
DECLARED_ID = re.compile(r"""Exercise\(\s*["'](\w+)["']""")  # how an exercise package declares its id
PUBLIC_POINTS, HIDDEN_POINTS = 2, 1  # the templates' checks: the check cell starts worth their sum


class ScaffoldError(Exception):
    """The exercise cannot be created: the message says why; nothing was written."""


def snake(name: str) -> str:
    """A task name as a module suffix: ColumnParallelLinear -> column_parallel_linear."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _existing(root: Path) -> dict[str, str]:
    """Exercise id -> where it is declared or has a notebook, read from the files (nothing imported)."""
    found = {}
    for folder in sorted((root / "grader" / "exercises").glob("*/")):
        for path in sorted(folder.glob("*.py")):
            for declared in DECLARED_ID.findall(path.read_text(errors="replace")):
                found.setdefault(declared, str(path.relative_to(root)))
    for folder in sorted((root / "solutions").glob("*/")):
        found.setdefault(folder.name, str(folder.relative_to(root)))
    return found


def _declared_tasks(root: Path) -> dict[str, str]:
    """Task name -> the exercise id that declares it, read from every `Exercise("id", tasks=[...])` call."""
    found = {}
    for path in sorted((root / "grader" / "exercises").glob("*/*.py")):
        try:
            tree = ast.parse(path.read_text(errors="replace"), str(path))
        except SyntaxError:
            continue  # a module being written: its tasks are not declared yet
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "Exercise"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                continue
            for keyword_ in node.keywords:
                if keyword_.arg == "tasks" and isinstance(keyword_.value, (ast.List, ast.Tuple)):
                    for element in keyword_.value.elts:
                        if isinstance(element, ast.Constant) and isinstance(element.value, str):
                            found.setdefault(element.value, str(node.args[0].value))
    return found


def next_free_id(root: Path, name: str) -> str:
    """The id after the course's last exercise, with this name: what `new-exercise` accepts next."""
    numbers = [int(e.split("_", 1)[0]) for e in _existing(Path(root)) if ID.match(e)]
    return f"{max(numbers, default=0) + 1:02d}_{name}"


def _validate(root: Path, exercise_id: str, task: str) -> re.Match:
    match = ID.match(exercise_id)
    if not match:
        raise ScaffoldError(
            f"malformed exercise id {exercise_id!r}: expected two digits, an underscore and a "
            "lower-case Python name, e.g. 05_my_topic"
        )
    name = match["name"]
    if keyword.iskeyword(name):
        raise ScaffoldError(f"{name!r} is a Python keyword: it cannot name the exercise's package")
    if not task.isidentifier() or keyword.iskeyword(task) or task.startswith("_"):
        raise ScaffoldError(
            f"malformed task name {task!r}: a Python name that is no keyword and does not start "
            "with _ (the notebook defines a function or class of that name)"
        )
    if not (root / "solutions").is_dir() or not (root / "grader" / "exercises").is_dir():
        raise ScaffoldError(
            f"{root} is not the course repository (no solutions/ or grader/exercises/): run this "
            "from the instructor's checkout, not from a student build"
        )
    existing = _existing(root)
    if exercise_id in existing:
        raise ScaffoldError(f"exercise {exercise_id} exists already ({existing[exercise_id]}): choose another id")
    same_number = [e for e in existing if e.split("_", 1)[0] == match["number"]]
    if same_number:
        raise ScaffoldError(
            f"exercise number {match['number']} is taken by {same_number[0]}: choose another "
            "number (the number orders the course)"
        )
    used_by = _declared_tasks(root).get(task)
    if used_by:
        raise ScaffoldError(
            f"task name {task!r} is used by exercise {used_by} already: choose a name no exercise of the course uses"
        )
    taken = [
        p for p in (root / "grader" / "exercises" / name, root / "grader" / "exercises" / f"{name}.py") if p.exists()
    ]
    if taken:
        raise ScaffoldError(
            f"grader/exercises/{taken[0].name} exists already: the package name {name!r} is "
            "taken; choose another name after the number"
        )
    return match


def _cell(kind: str, source: str, **nbgrader) -> nbformat.NotebookNode:
    import nbformat  # here, not at the top: every `python -m grader` command imports this module (2.3 s)

    cell = nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, **nbgrader}
    return cell


def _notebook(exercise_id: str, number: int, title: str, package: str, task: str) -> nbformat.NotebookNode:
    """The solution notebook: nbgrader's cells as grader.cells states them."""
    import nbformat

    fill = dict(id=exercise_id, number=number, title=title, package=package, task=task, **t.MARKERS)
    fixed = dict(grade=False, solution=False, locked=True)
    nb = nbformat.v4.new_notebook(
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        }
    )
    nb.cells = [
        _cell("markdown", t.INTRO.substitute(fill)),
        _cell("code", t.PROGRESS_CELL, grade_id="progress", **fixed),
        _cell("code", t.SETUP_CELL.substitute(fill), grade_id="setup", **fixed),
        _cell("markdown", t.TASK_TEXT.substitute(fill)),
        _cell(
            "code", t.ANSWER.substitute(fill), grade_id=task + cells.ANSWER, grade=False, solution=True, locked=False
        ),
        _cell(
            "code",
            t.CHECK_CELL.substitute(fill),
            grade_id=task + cells.CHECK,
            grade=True,
            solution=False,
            locked=True,
            points=PUBLIC_POINTS + HIDDEN_POINTS,
        ),
    ]
    nbformat.validate(nb)
    return nb


def plan(root: Path, exercise_id: str, task: str) -> dict[Path, str]:
    """Every file the new exercise needs, with its text (relative to root); refuses as _validate says."""
    import nbformat

    match = _validate(root, exercise_id, task)
    package, number = match["name"], int(match["number"])
    fill = dict(id=exercise_id, package=package, task=task, snake=snake(task), title=package.replace("_", " "))
    folder = Path("grader") / "exercises" / package
    files = {
        folder / "__init__.py": t.INIT.substitute(fill),
        folder / f"checks_{fill['snake']}.py": t.CHECKS.substitute(fill),
        folder / f"hidden_{fill['snake']}.py": t.HIDDEN.substitute(fill),
        folder / "reference.py": t.REFERENCE.substitute(fill),
        folder / "hints.py": t.HINTS.substitute(fill),
        Path("solutions") / exercise_id / f"{exercise_id}.ipynb": nbformat.writes(
            _notebook(exercise_id, number, fill["title"], package, task)
        )
        + "\n",
        Path("tests") / "exercises" / f"test_{exercise_id}.py": t.TEST.substitute(fill),
    }
    there = [str(p) for p in files if (root / p).exists()]
    if there:
        raise ScaffoldError(f"these files exist already: {', '.join(there)}; nothing was written")
    return files


def with_course_row(readme: str, exercise_id: str, task: str) -> str:
    """The README with the new exercise's row after the course table's last row (tests/test_docs.py reads it)."""
    lines = readme.splitlines(keepends=True)
    rows = [n for n, line in enumerate(lines) if re.match(r"\| \d+ \|", line)]
    if not rows:
        return readme
    number = int(exercise_id.split("_", 1)[0])
    row = f"| {number} | (its lesson, in lessons/) | `{exercise_id}` | `{task}`, and what else the exercise has you build |\n"
    return "".join(lines[: rows[-1] + 1] + [row] + lines[rows[-1] + 1 :])


def create(root: Path, exercise_id: str, task: str) -> list[Path]:
    """Write the new exercise's files under root and its row in the README's course table; on any failure, undo
    what this call wrote."""
    root = Path(root)
    files = plan(root, exercise_id, task)
    written: list[Path] = []
    made: list[Path] = []
    readme = root / "README.md"
    readme_text = readme.read_text(encoding="utf-8") if readme.is_file() else None
    try:
        for relative, text in files.items():
            path = root / relative
            for parent in reversed(path.parents):
                if parent != root and root in parent.parents and not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            with open(path, "x", encoding="utf-8") as f:  # "x": never replace a file that appeared meanwhile
                written.append(path)
                f.write(text)
        if readme_text is not None:
            readme.write_text(with_course_row(readme_text, exercise_id, task), encoding="utf-8")
    except BaseException:
        if readme_text is not None:
            readme.write_text(readme_text, encoding="utf-8")
        for path in reversed(written):
            path.unlink(missing_ok=True)
        for folder in reversed(made):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    return written


def _run(args) -> int:
    try:
        written = create(Path(args.root), args.id, args.task)
    except (ScaffoldError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = Path(args.root)
    print("\n".join(str(p.relative_to(root)) for p in written))
    print(
        f"\nnext: write the task in the notebook, its checks and hints in the package, then "
        f"`make exercises ASSIGNMENTS={args.id}`; test with `make test-exercise ASSIGNMENT={args.id}`"
    )
    return 0


def register(sub) -> None:
    parser = sub.add_parser("new-exercise", help="scaffold a new exercise: its package, solution notebook and tests")
    parser.add_argument("id", help="NN_name, e.g. 05_my_topic (NN orders the course; name is the package)")
    parser.add_argument("--task", required=True, help="the first task's name (a function the student writes)")
    parser.add_argument("--root", default=str(ROOT), help="the course repository (default: this grader's)")
    parser.set_defaults(func=_run)
