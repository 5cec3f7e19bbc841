"""Build the translated notebooks from the English ones and their catalogs.

- a lesson: `lessons/<lang>/<lesson>.ipynb`;
- an exercise's student release: `translated/<lang>/<id>/<id>.ipynb`, an nbgrader release directory
  (`make lab COURSE_LANG=es` releases from it).

Only markdown sources change: every code cell, output and metadata (grade ids, points, checksums) is the
English notebook's, so a translated notebook runs, and grades, exactly like the English one. A notebook
is built for a language once its catalog has at least one translated entry.
"""

from __future__ import annotations

import glob
import json
import os
import re

from grader.translate.catalogs import ROOT, LOCALE, lookup, notebook_name, po_path, read, status
from grader.translate.segments import translate


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
    """The notebook as JupyterLab saves it (jupyter_server calls nbformat.write): nbformat's JSON (sorted keys,
    indent 1, UTF-8, multi-line strings as lists of lines) and a final newline, so opening and saving a built
    notebook changes no byte."""
    import nbformat  # here: every `python -m grader` command imports this module (nbformat costs seconds)

    text = nbformat.writes(nbformat.from_dict(notebook), version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# a lesson named in an exercise's text, as inline code or already as a link (an exercise sits in <folder>/<id>/)
LESSON_PATH = re.compile(r"\[?`lessons/([\w.-]+\.ipynb)`(?:\]\(\.\./\.\./lessons/[\w.-]+\.ipynb\))?")


def translated_notebook(english_path: str, lang: str, locale_dir: str = LOCALE, catalog=None) -> tuple[dict, int]:
    """The notebook in `lang` (from `catalog`, else its catalog under `locale_dir`), and how many of its
    entries are shown in English."""
    with open(english_path, encoding="utf-8") as f:
        notebook = json.load(f)
    find = lookup(catalog if catalog is not None else read(po_path(lang, english_path, locale_dir), lang))
    english = 0
    release = (
        os.path.basename(os.path.dirname(os.path.abspath(english_path)))
        == os.path.splitext(os.path.basename(english_path))[0]
    )
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text, kept = translate("".join(cell["source"]), find)
            if release:  # an exercise points to the lesson in its own language (lessons/<lang>/ is built too)
                text = LESSON_PATH.sub(lambda m: f"[`lessons/{lang}/{m[1]}`](../../lessons/{lang}/{m[1]})", text)
            cell["source"] = _lines(text)
            english += kept
    if english:
        notebook["cells"].insert(
            0, {"cell_type": "markdown", "id": NOTE_CELL_ID, "metadata": {}, "source": _lines(NOTE[lang])}
        )
    return notebook, english


def english_notebooks(root: str = ROOT) -> list[str]:
    """Every notebook under the course root `root` that has catalogs: the lessons, then each exercise's
    student release."""
    return sorted(glob.glob(os.path.join(root, "lessons", "*.ipynb"))) + sorted(
        glob.glob(os.path.join(root, "exercises", "*", "*.ipynb"))
    )


def target(english: str, lang: str, root: str = ROOT) -> str:
    """Where the notebook in `lang` is built: lessons/<lang>/, or translated/<lang>/<id>/ for a release."""
    if os.path.dirname(os.path.abspath(english)) == os.path.abspath(os.path.join(root, "lessons")):
        return os.path.join(root, "lessons", lang, os.path.basename(english))
    exercise = os.path.basename(os.path.dirname(english))
    return os.path.join(root, "translated", lang, exercise, os.path.basename(english))


def build(lang: str, root: str = ROOT) -> list[str]:
    """Under the course root `root` (its lessons/, exercises/ and locale/), write the notebook in `lang` of
    every English notebook with a translated entry, and remove the others. Returns the paths written or
    removed."""
    changed, locale_dir = [], os.path.join(root, "locale")
    for english in english_notebooks(root):
        out = target(english, lang, root)
        catalog = read(po_path(lang, english, locale_dir), lang)
        if status(catalog).translated == 0:
            if os.path.exists(out):
                os.remove(out)
                changed.append(out)
            continue
        text = dumps(translated_notebook(english, lang, catalog=catalog)[0])
        if not os.path.exists(out) or open(out, encoding="utf-8").read() != text:
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
            changed.append(out)
    return changed


__all__ = ["build", "target", "translated_notebook", "english_notebooks", "notebook_name", "NOTE"]
