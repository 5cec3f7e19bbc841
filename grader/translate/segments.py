"""A markdown cell as translatable entries: paragraphs, headings and top-level list items.

Fenced code blocks, HTML-only lines and images stay English (they are not prose). The separators
between entries are kept exactly, so `join(split(text))` gives the text back byte for byte, and a
translated cell differs from its English one only inside the entries.
"""

from __future__ import annotations

import re

_LIST_ITEM = re.compile(r"^(?:[-*+]|\d+[.)]) ")
_FENCE = re.compile(r"^(```|~~~)")
_NOT_PROSE = re.compile(r"^\s*(?:<[^>]*>\s*)+$|^\s*!\[[^\]]*\]\([^)]*\)\s*$")


def split(text: str) -> list[tuple[str, bool]]:
    """The cell as (piece, translatable) pairs whose concatenation is `text`."""
    pieces: list[tuple[str, bool]] = []
    block: list[str] = []
    fenced = False

    def flush() -> None:
        if block:
            entry = "".join(block)
            body = entry.rstrip("\n")
            pieces.append((body, not fenced_block(body) and not _NOT_PROSE.match(body) and bool(body.strip())))
            if len(entry) > len(body):
                pieces.append((entry[len(body) :], False))
            block.clear()

    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            if not fenced:
                flush()
            block.append(line)
            fenced = not fenced
            if not fenced:
                flush()
            continue
        if fenced:
            block.append(line)
        elif not line.strip():
            flush()
            pieces.append((line, False))
        elif line.startswith("#") or _LIST_ITEM.match(line):
            flush()
            block.append(line)
            if line.startswith("#"):
                flush()
        else:
            block.append(line)
    flush()
    return _merge_separators(pieces)


def fenced_block(body: str) -> bool:
    return bool(_FENCE.match(body))


def _merge_separators(pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    merged: list[tuple[str, bool]] = []
    for piece, translatable in pieces:
        if merged and not translatable and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + piece, False)
        else:
            merged.append((piece, translatable))
    return merged


def entries(text: str) -> list[str]:
    """The translatable entries of a markdown cell, in order."""
    return [piece for piece, translatable in split(text) if translatable]


def translate(text: str, lookup) -> tuple[str, int]:
    """The cell with each entry replaced by `lookup(entry)` (None: kept English); and how many were kept."""
    out, english = [], 0
    for piece, translatable in split(text):
        found = lookup(piece) if translatable else None
        english += translatable and found is None
        out.append(found if found is not None else piece)
    return "".join(out), english
