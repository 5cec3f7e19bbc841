"""A student's answers, read without running them.

Three sources, one interface (`Submission.load()` runs in a rank and returns a
namespace holding the student's definitions):

- a notebook: its answer cells (nbgrader "solution" cells), each compiled as
  `<cell N>` so tracebacks point at the cell;
- a `.py` file that defines the task names;
- a live kernel (`from_namespace`): the task objects serialized by value with
  cloudpickle, so a function defined in a notebook's __main__ reaches the ranks.

Reading never executes student code and never writes to the submission.
"""

from __future__ import annotations

import ast
import io
import json
import linecache
import marshal
import os
import pickle
import re
import sys
import types
from collections import ChainMap
from dataclasses import dataclass, field

import cloudpickle

from grader import cells as cells_
from grader.i18n import _


class SubmissionError(Exception):
    """The submission cannot be read at all (CLI exit code 2)."""


@dataclass(frozen=True)
class Cell:
    filename: str  # "<cell 7>" or the .py path
    source: str


@dataclass
class LoadReport:
    """What happened when the answers were executed in a rank."""

    defined: list[str]
    problems: list[str] = field(default_factory=list)  # cell errors, in order
    unreached: dict[str, str] = field(default_factory=dict)  # name -> why its cell stopped before defining it


_MAGIC = re.compile(r"^(\s*)([%!].*)$", re.MULTILINE)


def _strip_magics(source: str) -> str:
    # IPython magics and shell escapes are not Python; keep line numbers intact.
    return _MAGIC.sub(lambda m: f"{m.group(1)}pass  # {m.group(2)}", source)


class Submission:
    def load(self) -> tuple[types.SimpleNamespace, LoadReport]:
        raise NotImplementedError

    def known_definitions(self) -> LoadReport | None:
        """What the answers define, when that is known without running them."""
        return None

    def register_sources(self) -> None:
        """Make the answer sources visible to linecache (for tracebacks)."""


class SourceSubmission(Submission):
    def __init__(self, cells: list[Cell]):
        self.cells = cells

    def register_sources(self) -> None:
        for cell in self.cells:
            lines = cell.source.splitlines(True)
            linecache.cache[cell.filename] = (len(cell.source), None, lines, cell.filename)

    def load(self):
        self.register_sources()
        module = types.ModuleType("submission")
        module.__dict__["__builtins__"] = __builtins__
        # @dataclass (and typing) look their class's module up in sys.modules.
        sys.modules[module.__name__] = module
        problems, unreached = [], {}
        for cell in self.cells:
            try:
                code = compile(_strip_magics(cell.source), cell.filename, "exec")
            except SyntaxError as exc:
                problems.append(f"{cell.filename} has a syntax error at line {exc.lineno}: {exc.msg}")
                unreached.update(dict.fromkeys(top_level_definitions(cell.source), problems[-1]))
                continue
            try:
                exec(code, module.__dict__)
            except BaseException as exc:  # SystemExit too: the rest of the answers still load
                problems.append(f"{cell.filename} raised {type(exc).__name__}: {exc}")
                unreached.update(dict.fromkeys(top_level_definitions(cell.source), problems[-1]))
        names = [n for n in module.__dict__ if not n.startswith("__")]
        unreached = {n: why for n, why in unreached.items() if n not in names}  # defined later after all: fine
        return types.SimpleNamespace(**{n: module.__dict__[n] for n in names}), LoadReport(names, problems, unreached)


def top_level_definitions(source: str) -> list[str]:
    """The functions and classes a cell defines at its top level, by its syntax alone (none if it does not parse):
    a task missing after that cell raised is one the error stopped."""
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError:
        found = re.findall(r"^(?:async\s+)?(?:def|class)\s+(\w+)", source, re.MULTILINE)
        return found
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _cell_names() -> dict[str, str]:
    """IPython's cell files ('/tmp/ipykernel_1/123.py') -> '<Cell In[7]>', as its tracebacks name them
    (its compiler's public format_code_name, asked about each file in linecache)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    label = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if label is None:
        return {}
    names = {}
    for filename in list(linecache.cache):
        kind_and_name = label(filename)
        if kind_and_name:
            names[filename] = "<{} {}>".format(*kind_and_name)
    return names


def _named_code(code: types.CodeType) -> types.CodeType:
    """The code, and the code nested in it, with each kernel cell's file name replaced by the cell's name."""
    consts = tuple(_named_code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=_KernelPickler.names.get(code.co_filename, code.co_filename), co_consts=consts)


class _KernelPickler(cloudpickle.Pickler):
    """cloudpickle, but code keeps a useful file name (cloudpickle writes '<dynamic-code>'),
    so tracebacks from the ranks point at the student's notebook cell. Code travels as
    marshal writes it (file names kept), which the ranks read back: they run this interpreter."""

    names: dict[str, str] = {}

    def _code_reduce(code):
        return marshal.loads, (marshal.dumps(_named_code(code)),)

    dispatch_table = ChainMap({types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table)


def _kernel_dumps(obj) -> bytes:
    buffer = io.BytesIO()
    _KernelPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


class PickledSubmission(Submission):
    """Objects taken from a live kernel, serialized by value."""

    def __init__(
        self,
        blobs: dict[str, bytes],
        problems: list[str],
        sources: dict[str, list[str]] | None = None,
        unreached: dict[str, str] | None = None,
    ):
        self.blobs = blobs
        self.problems = problems
        self.sources = sources or {}
        self.unreached = unreached or {}

    def known_definitions(self) -> LoadReport:
        return LoadReport(list(self.blobs), list(self.problems), dict(self.unreached))

    def register_sources(self) -> None:
        for name, lines in self.sources.items():
            linecache.cache[name] = (sum(map(len, lines)), None, lines, name)

    def load(self):
        self.register_sources()
        values, problems = {}, list(self.problems)
        for name, blob in self.blobs.items():
            try:
                values[name] = cloudpickle.loads(blob)
            except Exception as exc:
                problems.append(f"`{name}` could not be rebuilt in the worker process: {exc}")
        return types.SimpleNamespace(**values), LoadReport(list(values), problems)


def from_namespace(namespace: dict, names: list[str]) -> PickledSubmission:
    """Capture the current definitions of `names` from a kernel's namespace."""
    blobs, problems = {}, []
    _KernelPickler.names = _cell_names()
    sources = {
        _KernelPickler.names[f]: entry[2]
        for f, entry in list(linecache.cache.items())
        if f in _KernelPickler.names and len(entry) == 4
    }
    for name in names:
        if name not in namespace:
            continue
        try:
            blobs[name] = _kernel_dumps(namespace[name])
        except Exception as exc:
            problems.append(
                f"`{name}` cannot be sent to the worker processes ({exc}); "
                "does it refer to an open file, a lock or a process group?"
            )
    missing = [name for name in names if name not in namespace]
    return PickledSubmission(blobs, problems, sources=sources, unreached=_stopped_cells(missing, sources))


def _stopped_cells(missing: list[str], sources: dict[str, list[str]]) -> dict[str, str]:
    """name -> why: a kernel cell that defines the missing name ran but stopped before it (its error, when it is
    the kernel's last one)."""
    last = getattr(sys, "last_value", None)  # IPython keeps the last error a cell raised
    where = set()
    tb = getattr(last, "__traceback__", None)
    while tb is not None:
        where.add(_KernelPickler.names.get(tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    why = {}
    for cell, lines in sources.items():  # oldest first: the newest run of a cell wins
        for name in set(missing) & set(top_level_definitions("".join(lines))):
            error = f"{type(last).__name__}: {last}" if cell in where else None
            why[name] = (
                _("{cell} raised {error}", cell=cell, error=error)
                if error
                else _("{cell} stopped with an error", cell=cell)
            )
    return why


def read_notebook(path: str) -> SourceSubmission:
    try:
        with open(path, "rb") as f:
            raw = f.read()
        nb = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SubmissionError(f"{path} is not a readable notebook: {exc}") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise SubmissionError(f"{path} is not a notebook: it has no list of cells")
    answers = []
    for index, cell in enumerate(cells, start=1):
        if isinstance(cell, dict) and cells_.is_answer_cell(cell):
            answers.append(Cell(f"<cell {index}>", cells_.source(cell)))
    if not answers:
        raise SubmissionError(
            f"{path} has no answer cells (code cells marked as nbgrader solutions); "
            "is it the notebook of this exercise, with its cells intact?"
        )
    return SourceSubmission(answers)


def read_python_file(path: str) -> SourceSubmission:
    try:
        with open(path, "rb") as f:
            source = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SubmissionError(f"cannot read {path}: {exc}") from None
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise SubmissionError(f"{path} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    return SourceSubmission([Cell(os.path.abspath(path), source)])


def read_submission(path: str) -> SourceSubmission:
    if not os.path.isfile(path):
        raise SubmissionError(f"no such file: {path}")
    if path.endswith(".ipynb"):
        return read_notebook(path)
    if path.endswith(".py"):
        return read_python_file(path)
    raise SubmissionError(f"{path}: expected a notebook (.ipynb) or a Python file (.py)")
