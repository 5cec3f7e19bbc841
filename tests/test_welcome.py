"""The first page: `make lab` opens on welcome/ (in COURSE_LANG's language), which says where the lessons are and how
to fetch, check, hint, see progress and submit, with links that resolve."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.helpers import ROOT

LANGUAGES = {"": "welcome/welcome.ipynb", "es": "welcome/es/welcome.ipynb", "nl": "welcome/nl/welcome.ipynb"}
LANGUAGES["ja"] = "welcome/ja/welcome.ipynb"
LESSONS = sorted(f for f in os.listdir(os.path.join(ROOT, "lessons")) if f.endswith(".ipynb"))


def text_of(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return "".join("".join(c["source"]) for c in json.load(f)["cells"])


@pytest.mark.parametrize("lang", list(LANGUAGES), ids=[lang or "en" for lang in LANGUAGES])
def test_make_lab_opens_on_the_welcome_page_of_the_students_language(lang):
    shown = subprocess.run(
        ["make", "--no-print-directory", "--eval", "print-welcome: ; @echo $(WELCOME)", "print-welcome"]
        + ([f"COURSE_LANG={lang}"] if lang else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == LANGUAGES[lang], shown.stdout + shown.stderr
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        lab = re.search(r"^lab:.*?(?=^\S)", f.read(), re.S | re.M)[0]
    assert "--LabApp.default_url=/lab/tree/$(WELCOME)" in lab and "mkdir -p ddp-course" in lab


@pytest.mark.parametrize("lang", list(LANGUAGES), ids=[lang or "en" for lang in LANGUAGES])
def test_the_welcome_page_links_its_lessons_and_says_how_to_work(lang):
    page = LANGUAGES[lang]
    text = text_of(page)
    for step in ("check(", "hint(", "show_progress()", "Fetch", "Submit", "Validate", "Assignment List"):
        assert step in text, (page, step)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    lessons = os.path.join("lessons", lang)
    linked = {os.path.normpath(os.path.join(os.path.dirname(page), link)) for link in links}
    assert {os.path.join(lessons, name) for name in LESSONS} <= linked, linked  # every lesson, in its language
    for target in linked:
        if target != "ddp-course":  # make lab creates it: where the Assignment List fetches to
            assert os.path.exists(os.path.join(ROOT, target)), (page, target)
    assert "ddp-course" in linked
