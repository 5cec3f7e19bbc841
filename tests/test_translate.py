"""The course in other languages: catalogs in step with the English lessons, builds that
change only prose, and an English change that shows up as fuzzy instead of silently wrong."""

import glob
import json
import os
import re
import shutil

import pytest
from babel.messages.mofile import write_mo

from grader.translate import LANGUAGES
from grader.cells import answer_cells
from grader.translate.build import NOTE_CELL_ID, build, dumps, english_notebooks, target, translated_notebook
from grader.translate.catalogs import LOCALE, po_path, read, render, status, update
from grader.translate.segments import entries, split

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LESSONS = sorted(glob.glob(os.path.join(ROOT, "lessons", "*.ipynb")))
SOURCES = english_notebooks()  # the lessons and the exercises' student releases
NOTEBOOKS = SOURCES + sorted(glob.glob(os.path.join(ROOT, "solutions", "*", "*.ipynb")))
CODE_SPAN = re.compile(r"`[^`]+`")  # (a code span may wrap onto the next line)
LINK_TARGET = re.compile(r"\]\(([^)\s]+)")
PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def _markdown(path):
    with open(path, encoding="utf-8") as f:
        return ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_every_markdown_cell_splits_into_entries_and_joins_back_byte_for_byte(path):
    for text in _markdown(path):
        assert "".join(piece for piece, _ in split(text)) == text
        for entry in entries(text):
            assert not entry.startswith("```") and entry.strip(), entry


def test_code_fences_stay_english_and_list_items_are_entries_of_their_own():
    text = "Intro line\nsame paragraph.\n\n```python\nx = 1\n```\n\n- first `a`\n- second\n\n## Heading\nAfter."
    assert entries(text) == ["Intro line\nsame paragraph.", "- first `a`", "- second", "## Heading", "After."]


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("lesson", SOURCES, ids=os.path.basename)
def test_the_catalogs_are_in_step_with_the_english_notebooks(lesson, lang, tmp_path):
    committed = po_path(lang, lesson)
    assert os.path.exists(committed), f"{committed} is missing: run `make translations`"
    copy = tmp_path / "locale"
    shutil.copytree(LOCALE, copy)
    assert not update(lesson, lang, str(copy)), (
        f"{os.path.relpath(committed, ROOT)} is behind {os.path.relpath(lesson, ROOT)}: run `make translations`"
    )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_catalog_compiles_and_keeps_code_links_and_placeholders(lang, tmp_path):
    for lesson in SOURCES:
        catalog = read(po_path(lang, lesson), lang)
        with open(tmp_path / "out.mo", "wb") as f:
            write_mo(f, catalog)  # raises on a malformed catalog
        for message in catalog:
            if not message.id or not message.string:
                continue
            for pattern in (CODE_SPAN, LINK_TARGET, PLACEHOLDER):
                assert sorted(pattern.findall(message.string)) == sorted(pattern.findall(message.id)), (
                    f"{lang} {os.path.basename(lesson)}: {pattern.pattern} differ in the translation of {message.id!r}"
                )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_built_notebooks_are_up_to_date_and_differ_from_english_only_in_prose(lang, tmp_path):
    for lesson in SOURCES:
        built = target(lesson, lang)
        if status(read(po_path(lang, lesson), lang)).translated == 0:
            assert not os.path.exists(built), f"{built} has no translated entry and should not exist"
            continue
        notebook, _ = translated_notebook(lesson, lang)
        with open(built, encoding="utf-8") as f:
            assert f.read() == dumps(notebook), f"{built} is out of date: run `make translations`"
        with open(lesson, encoding="utf-8") as f:
            english = json.load(f)
        cells = [c for c in notebook["cells"] if c.get("id") != NOTE_CELL_ID]
        assert notebook["metadata"] == english["metadata"]
        assert len(cells) == len(english["cells"])
        for ours, theirs in zip(cells, english["cells"]):
            if ours["cell_type"] == "markdown":
                assert {k: v for k, v in ours.items() if k != "source"} == {
                    k: v for k, v in theirs.items() if k != "source"
                }
            else:
                assert ours == theirs, "a code cell, its outputs or its metadata differ from the English"


LESSON = """{"cells": [
 {"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# Title\\n", "\\n", "Rank 0 saves the `model`.\\n"]},
 {"cell_type": "code", "id": "b", "metadata": {"nbgrader": {"grade_id": "x"}}, "execution_count": null,
  "outputs": [], "source": ["print(1)"]},
 {"cell_type": "markdown", "id": "c", "metadata": {}, "source": ["Every rank loads it."]}],
 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"""


def test_a_changed_english_paragraph_turns_fuzzy_and_is_shown_in_english_with_the_note(tmp_path):
    lessons, locale = tmp_path / "lessons", tmp_path / "locale"  # a course root of its own: tmp_path
    lessons.mkdir()
    lesson = lessons / "09_demo.ipynb"
    lesson.write_text(LESSON)
    assert update(str(lesson), "es", str(locale))
    catalog = read(po_path("es", str(lesson), str(locale)), "es")
    catalog.get("# Title").string = "# Título"
    catalog.get("Rank 0 saves the `model`.").string = "El rank 0 guarda el `model`."
    catalog.get("Every rank loads it.").string = "Cada rank lo carga."
    po = po_path("es", str(lesson), str(locale))
    with open(po, "wb") as f:
        f.write(render(catalog))
    written = build("es", str(tmp_path))
    assert written and all(p.startswith(str(tmp_path)) for p in written), "a build touches only its own course root"
    built = json.loads((lessons / "es" / "09_demo.ipynb").read_text())
    assert [c["id"] for c in built["cells"]] == ["a", "b", "c"], "fully translated: no note"
    assert "".join(built["cells"][0]["source"]) == "# Título\n\nEl rank 0 guarda el `model`.\n"

    lesson.write_text(LESSON.replace("Rank 0 saves the `model`.", "Rank 0 alone saves the `model`."))
    assert update(str(lesson), "es", str(locale))
    changed = read(po, "es").get("Rank 0 alone saves the `model`.")
    assert changed.fuzzy and changed.string == "El rank 0 guarda el `model`."
    with open(po, encoding="utf-8") as f:
        assert '#| msgid "Rank 0 saves the `model`."' in f.read(), "the translator sees the English it translated"
    assert status(read(po, "es")).fuzzy == 1
    build("es", str(tmp_path))
    built = json.loads((lessons / "es" / "09_demo.ipynb").read_text())
    assert built["cells"][0]["id"] == NOTE_CELL_ID, "an English entry in a translated notebook: the note comes first"
    assert "".join(built["cells"][1]["source"]) == "# Título\n\nRank 0 alone saves the `model`.\n"
    assert "".join(built["cells"][3]["source"]) == "Cada rank lo carga."
    assert built["cells"][2] == json.loads(LESSON)["cells"][1], "code cells are the English ones"


def test_a_translated_exercise_grades_exactly_like_the_english_one(tmp_path):
    """Exercise 2 with a few entries in Spanish: the solution's answers get full marks, the untouched
    release 0, as in English (grade ids, points and checksums are the English notebook's)."""
    import subprocess
    import sys

    release = os.path.join(ROOT, "exercises", "02_ddp_basics", "02_ddp_basics.ipynb")
    locale = tmp_path / "locale"
    update(release, "es", str(locale))
    po = po_path("es", release, str(locale))
    catalog = read(po, "es")
    for message in list(catalog)[1:6]:
        message.string = "ES: " + message.id
    with open(po, "wb") as f:
        f.write(render(catalog))
    translated, english_left = translated_notebook(release, "es", str(locale))
    assert english_left and translated["cells"][0]["id"] == NOTE_CELL_ID
    assert sum("ES: " in "".join(c["source"]) for c in translated["cells"]) >= 1
    with open(os.path.join(ROOT, "solutions", "02_ddp_basics", "02_ddp_basics.ipynb"), encoding="utf-8") as f:
        solution = answer_cells(json.load(f)["cells"])
    solved = json.loads(json.dumps(translated))
    for cell in solved["cells"]:
        task = next((t for t, c in solution.items() if c.get("id") == cell.get("id")), None)
        if task:
            cell["source"] = solution[task]["source"]
    scores = {}
    for name, notebook in (("untouched", translated), ("solved", solved)):
        path = tmp_path / f"{name}.ipynb"
        path.write_text(dumps(notebook), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "grader", "check", "02_ddp_basics", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ROOT,
        )
        report = json.loads(done.stdout)
        scores[name] = (report["score"], report["max_score"])
    assert scores["untouched"][0] == 0
    assert scores["solved"][0] == scores["solved"][1] > 0, scores


# A glossary per language (locale/<lang>/glossary.csv): the English term, the chosen word (or "keep in English"),
# and the other renderings (a regular expression) that no translated entry may use. Code spans, link targets and
# formulas stay as they are in English, so they are left out of the search.
NOT_PROSE = re.compile(r"`[^`]+`|\]\([^)]*\)|\$[^$]+\$|https?://\S+")


def glossary(lang):
    import csv

    with open(os.path.join(LOCALE, lang, "glossary.csv"), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def other_renderings(catalog, rows):
    """(entry, term, what was found) for each translated entry that uses another rendering of a glossary term."""
    found = []
    for message in catalog:
        if not isinstance(message.id, str) or not message.id or not message.string:
            continue
        prose = NOT_PROSE.sub(" ", message.string)
        for row in rows:
            if row["other_renderings"]:
                hit = re.search(row["other_renderings"], prose, flags=re.IGNORECASE)
                if hit:
                    found.append((message.id, row["english"], hit.group()))
    return found


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_catalog_uses_the_glossary_word_for_each_term(lang):
    rows = glossary(lang)
    assert rows and all(row["english"] and row["chosen"] for row in rows), f"locale/{lang}/glossary.csv"
    for row in rows:
        re.compile(row["other_renderings"])
    problems = [
        (os.path.basename(path), *hit)
        for path in sorted(glob.glob(os.path.join(LOCALE, lang, "LC_MESSAGES", "*.po")))
        for hit in other_renderings(read(path, lang), rows)
    ]
    assert not problems, "\n".join(
        f"{name}: {found!r} for {term!r} (locale/{lang}/glossary.csv chose "
        f"{next(r['chosen'] for r in rows if r['english'] == term)!r}) in {entry[:80]!r}"
        for name, entry, term, found in problems
    )


def test_the_glossary_check_can_fail():
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="es")
    catalog.add("The epoch ends.", "El epoch termina.")
    catalog.add("Call `el epoch`.", "Llama a `el epoch`.")  # inside a code span: English code, not a rendering
    assert [hit[:2] for hit in other_renderings(catalog, glossary("es"))] == [("The epoch ends.", "epoch")]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_catalog_passes_msgfmt_check(lang):
    """`msgfmt -c` (GNU gettext) is what a translator's tools run. The catalogs hold no obsolete entry (msgfmt reports
    one whose English returns as a second definition), checked with or without msgfmt."""
    import subprocess

    paths = sorted(glob.glob(os.path.join(LOCALE, lang, "LC_MESSAGES", "*.po"))) + [
        os.path.join(ROOT, "grader", "locale", lang, "LC_MESSAGES", "grader.po")
    ]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            assert "\n#~ " not in f.read(), f"{path}: obsolete entries (run `python -m grader translate`)"
    if not shutil.which("msgfmt"):
        pytest.skip("msgfmt (GNU gettext) is not installed: only the obsolete entries were checked")
    for path in paths:
        done = subprocess.run(["msgfmt", "-c", "-o", os.devnull, path], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"msgfmt -c {os.path.relpath(path, ROOT)}:\n{done.stderr}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_translated_exercise_points_to_the_lesson_in_its_language(lang):
    for english in glob.glob(os.path.join(ROOT, "exercises", "*", "*.ipynb")):
        named = set(re.findall(r"`lessons/([\w.-]+\.ipynb)`", "".join(_markdown(english))))
        built = "".join(_markdown(target(english, lang)))
        for lesson in named:
            link = f"[`lessons/{lang}/{lesson}`](../../lessons/{lang}/{lesson})"  # from <folder>/<id>/<id>.ipynb
            assert link in built, f"{target(english, lang)} does not link lessons/{lang}/{lesson}"
            assert os.path.exists(os.path.join(ROOT, "lessons", lang, lesson)), f"lessons/{lang}/{lesson} is not built"


def test_every_english_exercise_links_its_lesson():
    for english in sorted(glob.glob(os.path.join(ROOT, "exercises", "*", "*.ipynb"))):
        text = "".join(_markdown(english))
        links = re.findall(r"\[`lessons/([\w.-]+\.ipynb)`\]\(\.\./\.\./lessons/([\w.-]+\.ipynb)\)", text)
        assert links, f"{os.path.relpath(english, ROOT)} links no lesson (a link, not only the path in code)"
        for named, target_name in links:
            assert named == target_name and os.path.exists(os.path.join(ROOT, "lessons", named)), (english, named)


def test_a_fuzzy_entrys_former_english_survives_a_rewrite_and_goes_when_it_is_translated(tmp_path):
    from grader.translate.catalogs import read, render

    path = tmp_path / "lesson.po"
    path.write_bytes(
        b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        b'#, fuzzy\n#| msgid "old \\"text\\""\nmsgid "new text"\nmsgstr "nuevo"\n'
    )
    for _ in range(2):  # babel alone reads `#|` as a comment and writes `# | msgid` from then on
        path.write_bytes(render(read(str(path), "es")))
        text = path.read_text()
        assert '#| msgid "old \\"text\\""' in text and "# |" not in text, text
    path.write_text(text.replace("#, fuzzy\n", ""))  # a translator confirmed it and left the old line
    assert "#|" not in render(read(str(path), "es")).decode()


def test_no_catalog_holds_a_former_english_as_a_comment():
    for path in glob.glob(os.path.join(ROOT, "locale", "*", "LC_MESSAGES", "*.po")) + glob.glob(
        os.path.join(ROOT, "grader", "locale", "*", "LC_MESSAGES", "*.po")
    ):
        with open(path, encoding="utf-8") as f:
            assert not any(line.startswith("# |") for line in f), f"{path}: run make translations"
