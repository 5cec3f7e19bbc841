"""nbgrader's own autograde refused in this course: it would run student code unsandboxed, as the instructor.

nbgrader's autograde executes each submitted notebook in a kernel of the user who runs it: the formgrader's
Autograde button (its AutogradeHandler calls NbGraderAPI.autograde) and plain `nbgrader autograde` would let a
submission write the course directory, the gradebook and /dev/shm, and read everything the instructor can.
`make grade` (python -m grader grade) grades in sandboxes and fills the same gradebook, autograded/ included.

The course's nbgrader_config.py (and the hub's instructor config) make RefuseAutogradeExporter the Autograde
converter's `exporter_class`: nbgrader builds it in `start()`, before it looks at any submission, so the refusal
comes before autograded/ is cleared (the button forces a regrade) and before any notebook or the gradebook is
touched; one line says to run `make grade`. RefuseAutograde also stands in for nbgrader's Execute among
`autograde_preprocessors`, so a converter built another way would still execute nothing. `make grade`'s own
autograde (inject.py) sets both itself. Light: nbgrader only.
"""
from __future__ import annotations

from nbconvert.exporters import NotebookExporter
from nbgrader.converters.base import NbGraderException
from nbgrader.preprocessors import NbGraderPreprocessor

REFUSAL = ("nbgrader's autograde is turned off in this course: it would run student code unsandboxed, as you; "
           "grade with `make grade` (python -m grader grade ASSIGNMENT), which runs it in sandboxes and fills "
           "this gradebook")


class RefuseAutogradeExporter(NotebookExporter):
    """Refuses as soon as the Autograde converter builds it, before it reads or removes anything."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log.error(REFUSAL)
        raise NbGraderException(REFUSAL)


class RefuseAutograde(NbGraderPreprocessor):
    """Refuses as soon as nbgrader builds it: no notebook is read, executed or removed."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.log.error(REFUSAL)
        raise NbGraderException(REFUSAL)


def autograde_preprocessors() -> list:
    """nbgrader's default autograde preprocessors, with RefuseAutograde in place of Execute."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    default = Autograde.class_traits()["autograde_preprocessors"].default()
    return [f"{__name__}.RefuseAutograde" if pp is Execute else pp for pp in default]
