"""nbgrader's Validate runs no student's notebook on the instructor's side: it would run it unsandboxed, as you.

nbgrader's Validator executes a notebook in a kernel of whoever validates it: `nbgrader validate` and the Validate
button (the validate_assignment server extension) would run a submitted notebook with the instructor's files, keys
and network, and the kernel starts in the notebook's folder (`python -m ipykernel_launcher` imports from there
first), so even a submission's extra files would run. The rule, checked before the notebook is read:

- allowed: a notebook under the course's source folder (solutions/) or its release folder (exercises/), the
  instructor's own; and a student's fetched copy, a folder `<course_id>/<assignment>/` as nbgrader's fetch makes it
  (`ddp-course/02_ddp_basics/` in the folder the lab or the command runs in; `make lab`'s Assignment List), so a
  student validating their own notebook keeps the button;
- refused, in one line: anything else, and always anything inside the course's submitted/, autograded/ or
  feedback/ folders or the exchange, where students' work lands on the instructor's side (a fetched-copy shape
  there included). Links are resolved first.

A student's own server on the hub never loads this (deploy/hub/student configures nbgrader without it); the
course's nbgrader_config.py (`make lab`, the command line) and the hub's instructor config call `refuse_validate()`.
nbgrader 0.9 builds its Validator by name in both places, and nothing it builds before the kernel starts takes a
configurable hook (Execute's kernel_manager_class is forced by its constructor), so `refuse_validate()` wraps the
Validator class's public `validate` once per process. Light: nbgrader only.
"""

from __future__ import annotations

import os

from nbgrader.converters.base import NbGraderException

REFUSAL = (
    "nbgrader's validate would run {notebook} unsandboxed, as you, and it is neither in the course's source or "
    "release folder nor a student's fetched copy: grade submissions with `make grade` (python -m grader grade "
    "ASSIGNMENT), which runs each in a sandbox"
)


class ValidateRefused(NbGraderException):
    """A notebook nbgrader's Validator must not run here; str() is the one line saying why and what instead."""


def _inside(path: str, folder: str) -> bool:
    folder = os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def refusal(notebook: str, config) -> str | None:
    """The one line refusing `notebook` under nbgrader `config`, or None when it may be validated."""
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.exchange import Exchange

    coursedir = CourseDirectory(config=config)
    path = os.path.realpath(notebook)
    folder = os.path.dirname(path)

    def under(name: str) -> str:
        return os.path.join(coursedir.root, name)

    students = [under(d) for d in (coursedir.submitted_directory, coursedir.autograded_directory)]
    students += [under(coursedir.feedback_directory), Exchange(config=config).root]
    if not any(_inside(path, f) for f in students):
        if any(_inside(path, under(d)) for d in (coursedir.source_directory, coursedir.release_directory)):
            return None
        course_id = coursedir.course_id
        if course_id and os.path.basename(os.path.dirname(folder)) == course_id:
            return None  # <course_id>/<assignment>/, where nbgrader's fetch puts a student's copy
    return REFUSAL.format(notebook=notebook)


def refuse_validate() -> None:
    """nbgrader's Validator, here (this process), refuses the notebooks `refusal` names before it reads them:
    `validate` (the button's handler) raises ValidateRefused; `validate_and_print` (`nbgrader validate`) exits
    with status 1 after that one error line, without a traceback."""
    from nbgrader.validator import Validator

    if getattr(Validator.validate, "refuses_unsandboxed", False):
        return
    validate, validate_and_print = Validator.validate, Validator.validate_and_print

    def guarded(self, filename: str, *args, **kwargs):
        why = refusal(filename, self.config)
        if why:
            self.log.error(why)
            raise ValidateRefused(why)
        return validate(self, filename, *args, **kwargs)

    def guarded_print(self, filename: str, *args, **kwargs):
        try:
            return validate_and_print(self, filename, *args, **kwargs)
        except ValidateRefused:
            raise SystemExit(1) from None  # said in one line already; nbgrader would add a traceback

    guarded.refuses_unsandboxed = True
    Validator.validate, Validator.validate_and_print = guarded, guarded_print
