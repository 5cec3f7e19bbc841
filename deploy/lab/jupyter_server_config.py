"""`make lab`'s Jupyter server: the course on one laptop, as a student sees it.

The server's root is the course (the instructor's formgrader needs source/, release/ and the gradebook
there), but the student's file browser does not list the answers: solutions/ (nbgrader's source
folder), the grader's hidden tests (grader/exercises/*/hidden_*.py), the gradebook and the instructor's
collected submissions. hide_globs only keeps them out of listings (the formgrader reads them from disk
and its links still open them): on one laptop the student could still type a path; a class has
separate accounts (deploy/hub).
"""

c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file

c.ContentsManager.hide_globs = [
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".DS_Store",
    "*~",  # Jupyter's own defaults, kept
    "solutions",
    "hidden_*.py",
    "gradebook.db",
    "submitted",
    "autograded",
    "feedback",
    "*.egg-info",
    "node_modules",
]
