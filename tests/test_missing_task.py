"""A task missing because its own cell raised: the check says which cell stopped and why, not only that the task
is not defined (a student who skipped the cell holding the imports reads the NameError that stopped it)."""

from __future__ import annotations

import sys

from grader.exercises import get_exercise
from grader.runner import run_checks
from grader.submission import Cell, SourceSubmission, _stopped_cells
from tests.helpers import assert_one_reason, failed

EXERCISE = "02_ddp_basics"
SKIPPED_IMPORTS = """
class Squares(Dataset):
    pass

def make_dataloader(dataset, batch_size, rank, world_size, seed=0):
    return None
"""


def test_a_task_whose_cell_raised_says_which_cell_and_why():
    cells = [Cell("<cell 3>", "x = 1\n"), Cell("<cell 9>", SKIPPED_IMPORTS), Cell("<cell 11>", "1 / 0\n")]
    report = run_checks(get_exercise(EXERCISE), SourceSubmission(cells), task="make_dataloader", timeout=20)
    assert len(failed(report)) == len(report.checks), "\n".join(report.lines())
    first = report.checks[0]
    assert_one_reason(report, first.name)  # said once, the task's other checks point to it
    message = first.message
    assert "`make_dataloader` is not defined in your answers" in message, message
    assert "the cell that defines it stopped before it" in message, message
    assert "<cell 9> raised NameError: name 'Dataset' is not defined" in message, message
    assert "ZeroDivisionError" not in message, message  # another cell's error is not this task's reason


def test_a_kernel_cell_that_raised_before_defining_the_task_is_named(monkeypatch):
    try:
        exec(compile("raise NameError(\"name 'Dataset' is not defined\")", "/tmp/ipykernel_1/9.py", "exec"), {})
    except NameError as exc:
        monkeypatch.setattr(sys, "last_value", exc, raising=False)  # what IPython keeps of a cell's error
    from grader.submission import _KernelPickler

    monkeypatch.setattr(_KernelPickler, "names", {"/tmp/ipykernel_1/9.py": "<Cell In[9]>"})
    sources = {"<Cell In[4]>": ["x = 1\n"], "<Cell In[9]>": SKIPPED_IMPORTS.splitlines(True)}
    why = _stopped_cells(["make_dataloader", "wrap_model"], sources)
    assert why == {"make_dataloader": "<Cell In[9]> raised NameError: name 'Dataset' is not defined"}
    from grader import i18n

    for name in i18n.LANGUAGE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COURSE_LANG", "es")  # in the student's language
    why = _stopped_cells(["make_dataloader"], sources)
    assert why == {"make_dataloader": "<Cell In[9]> lanzó NameError: name 'Dataset' is not defined"}
    monkeypatch.setattr(sys, "last_value", None, raising=False)  # the last error came from elsewhere
    monkeypatch.delenv("COURSE_LANG")
    assert _stopped_cells(["make_dataloader"], sources) == {"make_dataloader": "<Cell In[9]> stopped with an error"}
