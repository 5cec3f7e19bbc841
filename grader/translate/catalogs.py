"""One gettext catalog per notebook and language, kept in step with the English notebook (Babel).

`update` re-extracts the English entries and merges them into each language's catalog the way
gettext's msgmerge does: unchanged entries keep their translation, an entry whose English changed a
little keeps its old translation marked fuzzy (with the old English beside it, `#| msgid`), an entry
no longer in the notebook is dropped. A catalog is rewritten only when its messages change.
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, unescape, write_po

from grader.translate.segments import entries

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCALE = os.path.join(ROOT, "locale")
PROJECT = "ddp-course"


def notebook_name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def catalog_name(notebook: str) -> str:
    """A lesson's catalog is named after it; an exercise release's (`<id>/<id>.ipynb`) is `exercise-<id>`,
    since lesson 4 and exercise 4 share a name."""
    name = notebook_name(notebook)
    return f"exercise-{name}" if os.path.basename(os.path.dirname(os.path.abspath(notebook))) == name else name


def po_path(lang: str, notebook: str, locale_dir: str = LOCALE) -> str:
    return os.path.join(locale_dir, lang, "LC_MESSAGES", catalog_name(notebook) + ".po")


def template(notebook: str) -> Catalog:
    """The English entries of a notebook's markdown cells, each located by its cell's index."""
    with open(notebook, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    catalog = Catalog(project=PROJECT, fuzzy=False)
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            for entry in entries("".join(cell["source"])):
                catalog.add(entry, locations=[(os.path.basename(notebook), index)])
    return catalog


HEADER = """The course's {notebook} in {language}, translated from the English notebook.
Update: `python -m grader translate` (README: "The course in other languages")."""


def new_catalog(lang: str, header: str, domain: str | None = None) -> Catalog:
    """An empty catalog for `lang`, with the course's header; `header` may name {language}."""
    catalog = Catalog(
        locale=lang,
        domain=domain,
        project=PROJECT,
        version="1",
        fuzzy=False,
        copyright_holder="the course's authors",
        msgid_bugs_address="the course's issue tracker",
        language_team=f"ddp-course {lang}",
        last_translator="the course's translators",
    )
    catalog.header_comment = "# " + header.format(language=catalog.locale.english_name).replace("\n", "\n# ")
    return catalog


def read(path: str, lang: str) -> Catalog:
    if not os.path.exists(path):
        notebook = os.path.basename(path)[:-3]
        return new_catalog(lang, HEADER.replace("{notebook}", notebook))
    with open(path, "rb") as f:
        return previous_ids_restored(read_po(f, locale=lang))


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


def previous_ids_restored(catalog: Catalog) -> Catalog:
    """Babel writes a fuzzy entry's former English as `#| msgid "…"` but reads it back as a translator comment
    `| msgid "…"`, which it then writes as `# | msgid …` on every later run, fuzzy or not. Such comments are turned
    back into the entry's previous_id while it is fuzzy, and dropped once it is not."""
    for message in catalog:
        previous = [c for c in message.user_comments if c.startswith("|")]
        if not previous:
            continue
        message.user_comments = [c for c in message.user_comments if not c.startswith("|")]
        text = " ".join(c[1:].strip() for c in previous)
        if message.fuzzy and not message.previous_id and text.startswith("msgid "):
            message.previous_id = ["".join(unescape(q) for q in _QUOTED.findall(text[len("msgid ") :]))]
    return catalog


def render(catalog: Catalog, line_numbers: bool = True, format_flags: bool = False) -> bytes:
    """The catalog as a .po file that `msgfmt -c` accepts: entries gone from the source are dropped, not kept as
    `#~` (an obsolete entry whose English returns would be a second definition). Lesson prose is no format
    string: without `format_flags`, Babel's python-format guess (any "100% u") is dropped, which msgfmt would
    check. `line_numbers=False` keeps a catalog still when its source moves a line."""
    if not format_flags:
        for message in catalog:
            message.flags.discard("python-format")
    catalog.obsolete.clear()
    out = io.BytesIO()
    write_po(out, catalog, width=100, include_previous=True, sort_output=False, include_lineno=line_numbers)
    return out.getvalue()


def update(notebook: str, lang: str, locale_dir: str = LOCALE) -> bool:
    """Merge the notebook's English entries into `lang`'s catalog; True when the file changed."""
    path = po_path(lang, notebook, locale_dir)
    catalog = read(path, lang)
    catalog.update(template(notebook), update_creation_date=False)
    return write_if_changed(path, render(catalog))


def write_if_changed(path: str, data: bytes) -> bool:
    """Write `data` to `path` unless it holds exactly that already; True when the file changed."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return True


@dataclass
class Status:
    translated: int
    fuzzy: int
    missing: int

    @property
    def total(self) -> int:
        return self.translated + self.fuzzy + self.missing


def status(catalog: Catalog) -> Status:
    messages = [m for m in catalog if m.id]
    fuzzy = sum(1 for m in messages if m.fuzzy and m.string)
    translated = sum(1 for m in messages if m.string and not m.fuzzy)
    return Status(translated, fuzzy, len(messages) - translated - fuzzy)


def lookup(catalog: Catalog):
    """entry -> its translation, or None when it is missing or fuzzy (then the English is shown)."""

    def find(entry: str):
        message = catalog.get(entry)
        return message.string if message is not None and message.string and not message.fuzzy else None

    return find
