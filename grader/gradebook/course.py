"""A course directory (nbgrader's) and the configuration nbgrader reads there.

nbgrader_config.py is Python: reading it runs it. The grading parent reads it
once, on first use (`python -m grader grade` does so in its preflight, before
any student code runs), and every later use, the gradebook writer and
nbgrader's autograde included, gets a copy of that frozen configuration. A
submission that rewrites the file during a run changes nothing the run does;
the run puts the file back and flags it (batch.py, `instructor_files`).
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass
from functools import cached_property

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

# nbgrader runs the `alembic` command to create or upgrade the gradebook: it
# must be on PATH even when the venv is not activated.
_BIN = os.path.dirname(sys.executable)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

CONFIG_FILE = "nbgrader_config.py"
SQLITE = "sqlite:///"


@dataclass(frozen=True)
class Course:
    root: str

    @cached_property
    def _frozen(self) -> Config:  # cached_property writes the instance's __dict__: fine on a frozen dataclass
        config = Config()
        if os.path.exists(os.path.join(self.root, CONFIG_FILE)):
            config.merge(PyFileConfigLoader(CONFIG_FILE, path=self.root).load_config())
        config.CourseDirectory.root = self.root
        return config

    @property
    def config(self) -> Config:
        """The configuration as first read (a copy: a caller's changes stay its own)."""
        return copy.deepcopy(self._frozen)

    @property
    def db_url(self) -> str:
        url = self._frozen.CourseDirectory.get("db_url")
        return url or SQLITE + os.path.join(self.root, "gradebook.db")

    @property
    def sqlite_gradebook(self) -> str | None:
        """The gradebook's file when it is SQLite (a PostgreSQL gradebook has none)."""
        return self.db_url[len(SQLITE) :] if self.db_url.startswith(SQLITE) else None

    def instructor_files(self) -> dict[str, str]:
        """path -> what it is: the instructor's files a grading run watches and puts back if touched.
        SQLite's rollback journal and write-ahead log count as the gradebook: a forged hot journal or WAL
        would be replayed into it by the next connection."""
        files = {os.path.join(self.root, CONFIG_FILE): f"the course configuration ({CONFIG_FILE})"}
        if self.sqlite_gradebook:
            for suffix in ("", "-journal", "-wal"):
                files[self.sqlite_gradebook + suffix] = "the gradebook" + (f" ({suffix[1:]})" if suffix else "")
        return files

    def submitted(self, assignment: str) -> dict[str, str]:
        """student -> the submitted notebook of `assignment` (nbgrader's layout)."""
        base = os.path.join(self.root, "submitted")
        found = {}
        if os.path.isdir(base):
            for student in sorted(os.listdir(base)):
                folder = os.path.join(base, student, assignment)
                if os.path.isdir(folder):  # the notebook itself may be missing: graded as such
                    found[student] = os.path.join(folder, f"{assignment}.ipynb")
        return found

    def results_dir(self, assignment: str) -> str:
        return os.path.join(self.root, "graded", assignment)
