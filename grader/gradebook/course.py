"""A course directory (nbgrader's) and the configuration nbgrader reads there."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

# nbgrader runs the `alembic` command to create or upgrade the gradebook: it
# must be on PATH even when the venv is not activated.
_BIN = os.path.dirname(sys.executable)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


@dataclass(frozen=True)
class Course:
    root: str

    @property
    def config(self) -> Config:
        config = Config()
        path = os.path.join(self.root, "nbgrader_config.py")
        if os.path.exists(path):
            config.merge(PyFileConfigLoader("nbgrader_config.py", path=self.root).load_config())
        config.CourseDirectory.root = self.root
        return config

    @property
    def db_url(self) -> str:
        url = self.config.CourseDirectory.get("db_url")
        return url or "sqlite:///" + os.path.join(self.root, "gradebook.db")

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
