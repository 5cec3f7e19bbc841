"""Build `lessons/<lang>/<notebook>.ipynb` from the English notebook and its catalog.

Only markdown sources change: every code cell, output and metadata is the English notebook's, so a
translated notebook runs (and would grade) exactly like the English one. A notebook is built for a
language once its catalog has at least one translated entry.
"""
from __future__ import annotations

import glob
import json
import os

from grader.translate.catalogs import ROOT, LOCALE, lookup, notebook_name, po_path, read, status
from grader.translate.segments import translate

LESSONS = os.path.join(ROOT, "lessons")

# Shown first when some entry is still English (missing, or fuzzy after the English changed).
NOTE = {
    "es": "*Algunas partes de este cuaderno siguen en inglés: su traducción falta o quedó atrasada "
          "respecto al original.*",
    "nl": "*Sommige delen van dit notebook staan nog in het Engels: de vertaling ontbreekt of loopt "
          "achter op het origineel.*",
    "ja": "*このノートブックには英語のままの箇所があります。翻訳が未完成か、原文の更新に追いついていない部分です。*",
}
NOTE_CELL_ID = "translation-note"


def dumps(notebook: dict) -> str:
    """The repository's notebook format (nbformat's): sorted keys, indent 1, UTF-8, final newline."""
    return json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def translated_notebook(english_path: str, lang: str, locale_dir: str = LOCALE) -> tuple[dict, int]:
    """The notebook in `lang`, and how many of its entries are shown in English."""
    with open(english_path, encoding="utf-8") as f:
        notebook = json.load(f)
    find = lookup(read(po_path(lang, english_path, locale_dir), lang))
    english = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text, kept = translate("".join(cell["source"]), find)
            cell["source"] = _lines(text)
            english += kept
    if english:
        notebook["cells"].insert(0, {"cell_type": "markdown", "id": NOTE_CELL_ID, "metadata": {},
                                     "source": _lines(NOTE[lang])})
    return notebook, english


def build(lang: str, lessons_dir: str = LESSONS, locale_dir: str = LOCALE) -> list[str]:
    """Write `lessons_dir/<lang>/` for every lesson with a translated entry; remove the others. Returns
    the paths written or removed."""
    changed = []
    out_dir = os.path.join(lessons_dir, lang)
    for english in sorted(glob.glob(os.path.join(lessons_dir, "*.ipynb"))):
        target = os.path.join(out_dir, os.path.basename(english))
        if status(read(po_path(lang, english, locale_dir), lang)).translated == 0:
            if os.path.exists(target):
                os.remove(target)
                changed.append(target)
            continue
        text = dumps(translated_notebook(english, lang, locale_dir)[0])
        if not os.path.exists(target) or open(target, encoding="utf-8").read() != text:
            os.makedirs(out_dir, exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
            changed.append(target)
    return changed


def english_notebooks(lessons_dir: str = LESSONS) -> list[str]:
    return sorted(glob.glob(os.path.join(lessons_dir, "*.ipynb")))


__all__ = ["build", "translated_notebook", "english_notebooks", "notebook_name", "NOTE"]
