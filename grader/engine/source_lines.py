"""The student's source around a line a message names: the line's code, and the rank-dependent conditions it runs
under (`if rank == 0:`), read from the source the parent registered (linecache: a notebook's cells, a file).

    code_at("<cell 3>", 14)           -> "dist.all_reduce(total)"
    rank_conditions("<cell 3>", 14)   -> [(13, "rank == 0", True)]   (line of the `if`, its test, in its body)
"""

from __future__ import annotations

import ast
import io
import linecache
import re
import tokenize

_RANKISH = re.compile(r"rank", re.I)  # rank, get_rank(), local_rank, self.rank, ctx.rank, RANK


def code_at(filename: str, line: int) -> str:
    """The line's code, stripped, without its comment ("" when the source is not known)."""
    code = linecache.getline(filename, line).strip()
    try:
        comment = next(
            (t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.COMMENT), None
        )
    except (tokenize.TokenError, SyntaxError):  # a line of a longer statement: kept whole
        return code
    return code[: comment.start[1]].rstrip() if comment else code


def _tree(filename: str) -> ast.AST | None:
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    source = "\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in source.split("\n"))  # IPython magics
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _rank_dependent(test: ast.AST) -> bool:
    for node in ast.walk(test):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name and _RANKISH.search(name):
            return True
    return False


def _within(statements: list, line: int) -> bool:
    return bool(statements) and statements[0].lineno <= line <= (statements[-1].end_lineno or statements[-1].lineno)


def rank_conditions(filename: str, line: int) -> list[tuple[int, str, bool]]:
    """The `if`/`while` tests around `line` that depend on the rank, outermost first: (their line, their test's
    code, True when `line` is in their body, False when in their `else`)."""
    tree = _tree(filename)
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.If, ast.While)) or not _rank_dependent(node.test):
            continue
        in_body, in_else = _within(node.body, line), _within(node.orelse, line)
        if in_body or in_else:
            found.append((node.lineno, ast.unparse(node.test), in_body))
    return sorted(found)


__all__ = ["code_at", "rank_conditions"]
