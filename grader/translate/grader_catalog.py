"""The grader's own catalog (grader/i18n.py): its messages, extracted from grader/'s source with Babel.

The messages are the strings passed to `_`, `N_` and `ngettext` in grader/*.py (what `pybabel extract -k _
-k N_ -k ngettext:1,2` finds). `update` merges them into each language's `grader/locale/<lang>/LC_MESSAGES/
grader.po` as catalogs.update does for a notebook: an entry whose English changed turns fuzzy (shown in
English until a translator checks it), a removed one is dropped.
"""

from __future__ import annotations

import os

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir

from grader.i18n import DOMAIN, LOCALE_DIR, po_path
from grader.translate import catalogs
from grader.translate.catalogs import PROJECT, new_catalog, write_if_changed

PACKAGE = os.path.dirname(LOCALE_DIR)
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2)}
NAME = DOMAIN  # as --status lists it
HEADER = """The grader's own messages in {language} (grader/i18n.py), extracted from grader/*.py.
Update: `python -m grader translate` (README: "The course in other languages")."""


def template() -> Catalog:
    catalog = Catalog(project=PROJECT, fuzzy=False)
    for filename, lineno, message, comments, context in extract_from_dir(
        PACKAGE, method_map=[("**.py", "python")], keywords=KEYWORDS, comment_tags=("i18n:",), strip_comment_tags=True
    ):
        if filename.startswith("translate" + os.sep) or filename == "i18n.py":
            continue  # the tooling's docstrings show the keywords, they are no messages
        catalog.add(
            message,
            locations=[(filename, lineno)],
            auto_comments=comments,
            context=context,
            flags=("python-brace-format",) if "{" in str(message) else (),
        )
    return catalog


def read(lang: str) -> Catalog:
    from babel.messages.pofile import read_po

    path = po_path(lang)
    if os.path.exists(path):
        with open(path, "rb") as f:
            return catalogs.previous_ids_restored(read_po(f, locale=lang, domain=DOMAIN))
    return new_catalog(lang, HEADER, domain=DOMAIN)


def render(catalog: Catalog) -> bytes:
    """Without line numbers: an edit elsewhere in a module does not touch the catalog."""
    return catalogs.render(catalog, line_numbers=False, format_flags=True)


def update(lang: str, source: Catalog | None = None) -> bool:
    """Merge the grader's English messages into `lang`'s catalog; True when the file changed."""
    path = po_path(lang)
    catalog = read(lang)
    catalog.update(source if source is not None else template(), update_creation_date=False)
    return write_if_changed(path, render(catalog))
