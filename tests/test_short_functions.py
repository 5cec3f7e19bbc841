"""No function or method in grader/ is longer than 60 lines, from its `def` to the last line of its body
(DEVELOPERS.md: small, self-explanatory pieces). A longer one is split into named helpers. No module of grader/ is
longer than 400 lines (CONTRIBUTING.md: one concept each, about 300 lines): a longer one is split by concept."""

import ast
import pathlib

GRADER = pathlib.Path(__file__).resolve().parent.parent / "grader"
MAX_LINES = 60
MAX_MODULE_LINES = 400


def function_lengths() -> dict[str, int]:
    """'path:qualified name' -> lines from `def` to the end of the body, for every function in grader/."""
    lengths = {}
    for path in sorted(GRADER.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        _walk(tree, path.relative_to(GRADER).as_posix(), "", lengths)
    return lengths


def _walk(node, path: str, prefix: str, lengths: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + child.name
            if not isinstance(child, ast.ClassDef):
                lengths[f"{path}:{name}"] = child.body[-1].end_lineno - child.lineno + 1
            _walk(child, path, name + ".", lengths)
        else:
            _walk(child, path, prefix, lengths)


def test_no_function_in_grader_is_longer_than_60_lines():
    lengths = function_lengths()
    assert len(lengths) > 500  # the walk reached the package
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines (split them into named helpers): {too_long}"


def test_no_module_in_grader_is_longer_than_400_lines():
    counts = {
        path.relative_to(GRADER).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in GRADER.rglob("*.py")
    }
    assert len(counts) > 100 and max(counts.values()) > 200  # the walk reached the package, and counts lines
    too_long = {name: n for name, n in counts.items() if n > MAX_MODULE_LINES}
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {too_long}"


def test_the_count_runs_from_def_to_the_end_of_the_body():
    source = 'def f(\n    a,\n):\n    """doc"""\n    x = 1\n\n    return x\n\n\n# after\n'
    lengths = {}
    _walk(ast.parse(source), "m.py", "", lengths)
    assert lengths == {"m.py:f": 7}
    nested = "class C:\n    @property\n    def p(self):\n        def inner():\n            pass\n        return 1\n"
    lengths = {}
    _walk(ast.parse(nested), "m.py", "", lengths)
    assert lengths == {"m.py:C.p": 4, "m.py:C.p.inner": 2}
