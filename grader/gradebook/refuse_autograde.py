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
autograde (inject.py) sets both itself.

For notebooks one trusts (a benchmark against nbgrader, the course's own samples), one explicit flag on the
command line lets nbgrader's autograde run as usual: `nbgrader autograde A --UnsandboxedAutograde.allowed=True`.
The formgrader's button sends no flag. Light: nbgrader only.
"""

from __future__ import annotations

from nbconvert.exporters import NotebookExporter
from nbgrader.converters.base import NbGraderException
from nbgrader.preprocessors import Execute

REFUSAL = (
    "nbgrader's autograde is turned off in this course: it would run student code unsandboxed, as you; "
    "grade with `make grade` (python -m grader grade ASSIGNMENT), which runs it in sandboxes and fills "
    "this gradebook"
)
ALLOW = "--UnsandboxedAutograde.allowed=True"  # nbgrader's autograde as usual, for notebooks one trusts


def _refuse_unless_allowed(configurable) -> None:
    allowed = configurable.config.UnsandboxedAutograde.get("allowed")  # no trait declares it: from the command
    if str(allowed).strip().lower() != "true":  # line it is a string, in a file True
        configurable.log.error(REFUSAL)
        raise NbGraderException(REFUSAL)


class RefuseAutogradeExporter(NotebookExporter):
    """nbgrader's NotebookExporter, which refuses as soon as the Autograde converter builds it (before it reads
    or removes anything) unless unsandboxed autograde was allowed explicitly."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _refuse_unless_allowed(self)


class RefuseAutograde(Execute):
    """nbgrader's Execute, which refuses when built unless unsandboxed autograde was allowed explicitly."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _refuse_unless_allowed(self)


def autograde_preprocessors() -> list:
    """nbgrader's default autograde preprocessors, with RefuseAutograde in place of Execute."""
    from nbgrader.converters import Autograde

    default = Autograde.class_traits()["autograde_preprocessors"].default()
    return [RefuseAutograde if pp is Execute else pp for pp in default]
