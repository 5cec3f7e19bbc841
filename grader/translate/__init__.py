"""The course in other languages, from gettext catalogs.

    python -m grader translate            update the catalogs from the English notebooks, then build
    python -m grader translate --status   per language and notebook: translated, fuzzy, missing

The English notebooks (the lessons, the exercises' student releases) are the source. Each markdown
cell is cut into entries (`segments.py`); the entries of one notebook are the messages of its catalog,
`locale/<lang>/LC_MESSAGES/<notebook>.po` (`catalogs.py`, with Babel: a changed English entry turns
fuzzy, as with gettext's msgmerge). The build (`build.py`) writes `lessons/<lang>/<lesson>.ipynb` and
`translated/<lang>/<id>/<id>.ipynb` (an exercise's release, an nbgrader release directory): code cells,
outputs and metadata are the English notebook's, byte for byte; an entry that is fuzzy or missing is
shown in English, and the notebook then opens with a one-line note saying so.
command.py is `python -m grader translate`; grader_catalog.py extracts the grader's own messages
(grader/i18n.py) into grader/locale/.
"""

LANGUAGES = ("es", "nl", "ja")
