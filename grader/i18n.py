"""The grader's own text in the student's language: gettext, one domain, named placeholders.

    from grader.i18n import _, N_, ngettext
    _("`{task}` is not defined in your answers", task=task)
    ngettext("{n} check", "{n} checks", n)            # n is a placeholder too
    WHY = N_("a sentence kept in a table")            # marked for extraction; _() translates it when shown

The text is English in the code (the msgid) and the catalogs are
`grader/locale/<lang>/LC_MESSAGES/grader.po`, inside the package: a student build and the grading
sandbox carry the package, not the course's `locale/` folder. They are read as .po (Babel) and
compiled in memory to a standard `gettext.GNUTranslations`, so no binary .mo is committed and the
lookups are gettext's own: a missing or fuzzy entry shows the English. `python -m grader translate`
extracts the entries from grader/ (grader/translate/grader_catalog.py).

The language, read when the text is made: COURSE_LANG, else the locale (LC_ALL, LC_MESSAGES, LANG,
as gettext reads them), else English; one that has no catalog is English.
"""

from __future__ import annotations

import functools
import gettext
import io
import os

DOMAIN = "grader"
LOCALE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "locale")
SOURCE_LANGUAGE = "en"
LANGUAGE_VARIABLES = ("COURSE_LANG", "LC_ALL", "LC_MESSAGES", "LANG")


def po_path(lang: str) -> str:
    return os.path.join(LOCALE_DIR, lang, "LC_MESSAGES", DOMAIN + ".po")


def languages() -> list[str]:
    """The languages with a grader catalog."""
    if not os.path.isdir(LOCALE_DIR):
        return []
    return sorted(lang for lang in os.listdir(LOCALE_DIR) if os.path.isfile(po_path(lang)))


def _code(value: str) -> str:
    """'nl_NL.UTF-8' -> 'nl', 'es-ES' -> 'es', 'C' -> 'c'."""
    return value.split(".")[0].split("@")[0].replace("-", "_").split("_")[0].lower()


def language() -> str:
    """The first of COURSE_LANG, LC_ALL, LC_MESSAGES, LANG that is set decides; English when none is, or
    when its language has no catalog (C, POSIX, en, an unknown code)."""
    for name in LANGUAGE_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            code = _code(value)
            return code if code in languages() else SOURCE_LANGUAGE
    return SOURCE_LANGUAGE


@functools.lru_cache(maxsize=8)
def _read(lang: str, mtime: float):
    from babel.messages.pofile import read_po

    with open(po_path(lang), "rb") as f:
        return read_po(f, locale=lang, domain=DOMAIN)


@functools.lru_cache(maxsize=8)
def _compiled(lang: str, mtime: float) -> gettext.NullTranslations:
    from babel.messages.mofile import write_mo

    mo = io.BytesIO()
    write_mo(mo, _read(lang, mtime), use_fuzzy=False)  # a fuzzy entry is no translation: gettext shows the English
    mo.seek(0)
    return gettext.GNUTranslations(mo)


def translations(lang: str | None = None) -> gettext.NullTranslations:
    lang = lang or language()
    try:
        return _compiled(lang, os.stat(po_path(lang)).st_mtime)
    except OSError:
        return gettext.NullTranslations()


def _format(translated: str, english: str, values: dict) -> str:
    """The translation with its named placeholders filled in; the English when the translation names a
    placeholder the English does not give (a catalog error must not hide the message)."""
    try:
        return translated.format(**values)
    except (KeyError, IndexError, ValueError):
        return english.format(**values)


def _(message: str, /, **values) -> str:
    """`message` in the student's language, its `{name}` placeholders filled from `values`. Without values
    nothing is formatted (a hint's `{...}` stays); with values, literal braces are doubled as in str.format."""
    translated = translations().gettext(message)
    return _format(translated, message, values) if values else translated


def ngettext(singular: str, plural: str, n: int, /, **values) -> str:
    """The singular or plural form for n, by the language's plural rule; `{n}` is filled in too."""
    english = singular if n == 1 else plural
    return _format(translations().ngettext(singular, plural, n), english, {"n": n, **values})


def translated_text(lang: str) -> str:
    """Every translation in `lang`'s catalog, one a line: words the grader's own text may use."""
    try:
        catalog = _read(lang, os.stat(po_path(lang)).st_mtime)
    except OSError:
        return ""
    strings = [m.string for m in catalog if m.id and not m.fuzzy]
    return "\n".join(s for string in strings for s in (string if isinstance(string, tuple) else (string,)) if s)


def N_(message: str, /) -> str:
    """Marks `message` for extraction without translating it (a table built at import); _() it when shown."""
    return message


__all__ = ["_", "N_", "ngettext", "language", "languages", "translations", "po_path", "LOCALE_DIR", "DOMAIN"]
