"""python -m grader translate [--status] [--lang L ...]

Without --status: update every catalog from the English notebooks (lessons and exercise releases), then
build lessons/<lang>/ and translated/<lang>/.
With --status: per language and notebook, the share of entries translated, fuzzy and missing.
Both also cover the grader's own messages (grader/i18n.py, catalog `grader`: grader_catalog.py).
"""

from __future__ import annotations

from grader.translate import LANGUAGES, grader_catalog
from grader.translate.build import build, english_notebooks
from grader.translate.catalogs import catalog_name, po_path, read, status, update


def _status(languages) -> int:
    print(f"{'lang':5s} {'notebook':38s} {'translated':>10s} {'fuzzy':>6s} {'missing':>8s}")
    for lang in languages:
        catalogs = [(catalog_name(nb), read(po_path(lang, nb), lang)) for nb in english_notebooks()]
        for name, catalog in catalogs + [(grader_catalog.NAME, grader_catalog.read(lang))]:
            s = status(catalog)
            share = lambda n: f"{100 * n / s.total:.0f}%" if s.total else "-"  # noqa: E731
            print(
                f"{lang:5s} {name:38s} {share(s.translated):>10s} {share(s.fuzzy):>6s} "
                f"{share(s.missing):>8s}  of {s.total} entries"
            )
    return 0


def _run(args) -> int:
    languages = args.lang or list(LANGUAGES)
    if args.status:
        return _status(languages)
    grader_messages = grader_catalog.template()  # the grader's own text (grader/i18n.py)
    for lang in languages:
        for notebook in english_notebooks():
            if update(notebook, lang):
                print(f"updated {po_path(lang, notebook)}")
        if grader_catalog.update(lang, grader_messages):
            print(f"updated {grader_catalog.po_path(lang)}")
        for path in build(lang):
            print(f"built {path}")
    return 0


def register(sub) -> None:
    parser = sub.add_parser(
        "translate",
        help="update the translation catalogs (locale/) from the English "
        "lessons and exercises, build lessons/<lang>/ and "
        "translated/<lang>/; --status: how much is done",
    )
    parser.add_argument("--status", action="store_true", help="print the share translated, fuzzy and missing")
    parser.add_argument("--lang", action="append", choices=LANGUAGES, help="only this language (repeatable)")
    parser.set_defaults(func=_run)
