"""hint("task") in an exercise notebook: a ladder of two or three hints per task, one more per call.

    from grader.notebook import checker, hinter
    hint = hinter("02_ddp_basics")
    hint("MiniDDP")    # Hint 1 of 3: a nudge; the next call shows hint 2, ... up to the key API

The hints are data of each exercise, `grader/exercises/<name>/hints.py`:
`HINTS = {task: [nudge, ..., key API]}` (markdown). They live in the grader package,
not in the notebook, so a student sees one only by asking for it; none gives an
answer cell's code (tests/test_hints.py compares them with the solutions).

A check of a typical mistake carries a hint of its own (`CHECK_HINTS = {check: hint}` in the same hints.py): the
notebook's check(task) notes the first check that failed (the one that states the reason), and the next hint(task)
shows that check's hint first, once, then goes on with the task's ladder.

How many hints a student has revealed, per exercise and task, persists in one small
JSON file per user (like the progress cache, but state: $XDG_STATE_HOME/ddp-course/
hints.json); the progress view shows it. It is the student's own count: it never
reaches the gradebook, and a notebook run by nbgrader (autograde, validate) shows
and counts nothing.
"""

from __future__ import annotations

import difflib
import importlib
import json
import os

from grader.exercises import find
from grader.i18n import _


def state_path() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ddp-course", "hints.json")


def tasks_of(exercise_id: str) -> list[str]:
    """The exercise's tasks, from its declaration (no check module imported: no torch)."""
    return list(importlib.import_module(find(exercise_id).package).EXERCISE.tasks)


def _hints_module(exercise_id: str):
    """The exercise's hints.py, or None for an exercise without one."""
    try:
        return importlib.import_module(f"{find(exercise_id).package}.hints")
    except ModuleNotFoundError as exc:
        if exc.name != f"{find(exercise_id).package}.hints":
            raise
        return None


def ladders(exercise_id: str) -> dict[str, list[str]]:
    """task -> its hints, first nudge to key API, in the student's language where the grader's catalog has them
    (exercise 2's; grader/i18n.py); {} for an exercise without a hints.py."""
    module = _hints_module(exercise_id)
    return {task: [_(hint) for hint in hints] for task, hints in module.HINTS.items()} if module else {}


def check_hints(exercise_id: str) -> dict[str, str]:
    """check -> the hint for its typical mistake (CHECK_HINTS of the exercise's hints.py), translated."""
    module = _hints_module(exercise_id)
    return {check: _(hint) for check, hint in getattr(module, "CHECK_HINTS", {}).items()}


FAILING = "failing checks"  # key of an exercise's state: task -> [the check that failed last, its hint shown]
_failing_here: dict[tuple[str, str], list] = {}  # this kernel's, in case the state file cannot be written


def note_checked(exercise_id: str, task: str, failed_check: str | None) -> None:
    """What check(task) found: the check that states why it failed (its first failed one), or None when all
    passed. The next hint(task) starts with that check's hint."""
    record = [failed_check, False] if failed_check else None
    if failed_check and (_failing_check(exercise_id, task) or [None])[0] == failed_check:
        return  # the same check failing again: its hint, once shown, is not shown again
    _failing_here[exercise_id, task] = record
    state = _load()
    mine = state.get(exercise_id) if isinstance(state.get(exercise_id), dict) else {}
    failing = mine.get(FAILING) if isinstance(mine.get(FAILING), dict) else {}
    failing = {t: r for t, r in failing.items() if t != task} | ({task: record} if record else {})
    state[exercise_id] = {**mine, FAILING: failing}
    _write(state)


def _failing_check(exercise_id: str, task: str) -> list | None:
    """[check, shown] of the task's last failing check, this kernel's record first, then the state file's."""
    if (exercise_id, task) in _failing_here:
        return _failing_here[exercise_id, task]
    mine = _load().get(exercise_id)
    failing = mine.get(FAILING) if isinstance(mine, dict) else None
    record = failing.get(task) if isinstance(failing, dict) else None
    valid = isinstance(record, list) and len(record) == 2 and isinstance(record[0], str)
    return record if valid else None


def _load() -> dict:
    try:
        with open(state_path(), encoding="utf-8") as f:
            state = json.load(f)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def hints_used(exercise_id: str) -> dict[str, int]:
    """task -> how many of its hints this user has revealed (tasks never asked about left out)."""
    counts = _load().get(exercise_id, {})
    if not isinstance(counts, dict):
        return {}
    return {t: n for t, n in counts.items() if isinstance(t, str) and isinstance(n, int) and n > 0}


def _record(exercise_id: str, task: str, count: int) -> None:
    state = _load()
    mine = state.get(exercise_id) if isinstance(state.get(exercise_id), dict) else {}
    state[exercise_id] = {**mine, task: count}
    _write(state)


def _write(state: dict) -> None:
    path = state_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(tmp, path)  # atomic: two kernels may write at once
    except OSError:
        pass  # a read-only home: the kernel still counts, the count is only not kept


class UnknownTask(ValueError):
    """hint() of a task the exercise does not have: the message lists its tasks."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mUnknownTask\x1b[0m: {self}"]  # the message, not the grader's frames


def hinter(exercise_id: str):
    """The notebook's hint(task): reveals the task's next hint and displays it."""
    tasks = tasks_of(exercise_id)  # an unknown exercise id fails here, with the list of exercises
    seen: dict[str, int] = {}  # this kernel's count, in case the state file cannot be written

    def hint(task: str | None = None) -> None:
        if task is None:  # hint(): which tasks there are, and how far each ladder is read
            used = hints_used(exercise_id)
            counts = ", ".join(
                f"`{t}` ({max(used.get(t, 0), seen.get(t, 0))}/{len(ladders(exercise_id).get(t, []))})" for t in tasks
            )
            _show(
                _('`hint("<task>")` reveals a task\'s next hint. Tasks (hints seen / written): {tasks}', tasks=counts)
            )
            return
        if task not in tasks:
            close = difflib.get_close_matches(str(task), tasks, n=1)
            raise UnknownTask(
                _("{exercise} has no task {task!r}", exercise=exercise_id, task=task)
                + (" " + _("(did you mean {close!r}?)", close=close[0]) if close else "")
                + _("; its tasks are: {tasks}", tasks=", ".join(tasks))
            ) from None
        if os.environ.get("NBGRADER_EXECUTION"):
            return  # nbgrader runs the notebook: no hint shown, none counted
        if _show_check_hint(exercise_id, task):
            return
        ladder = ladders(exercise_id).get(task, [])
        if not ladder:
            _show(_("No hints are written for `{task}` yet: ask your instructor.", task=task))
            return
        used = max(hints_used(exercise_id).get(task, 0), seen.get(task, 0))
        if used >= len(ladder):
            _show(
                _("No hint left for `{task}` ({n} of {n} shown). Here they are again:", task=task, n=len(ladder))
                + "\n\n"
                + "\n\n".join(f"{i}. {text}" for i, text in enumerate(ladder, 1))
            )
            return
        seen[task] = used + 1
        _record(exercise_id, task, used + 1)
        after = (
            _("That was the last one.")
            if used + 1 == len(ladder)
            else _('`hint("{task}")` again shows the next.', task=task)
        )
        _show(
            _("**Hint {number} of {total}** for `{task}`:", number=used + 1, total=len(ladder), task=task)
            + f"\n\n{ladder[used]}\n\n*{after}*"
        )

    return hint


def _show_check_hint(exercise_id: str, task: str) -> bool:
    """The hint of the task's last failing check, once per failure; True when shown."""
    record = _failing_check(exercise_id, task)
    text = check_hints(exercise_id).get(record[0]) if record and not record[1] else None
    if text is None:
        return False
    _failing_here[exercise_id, task] = [record[0], True]
    state = _load()
    mine = state.get(exercise_id)
    failing = mine.get(FAILING) if isinstance(mine, dict) else None
    if isinstance(failing, dict) and failing.get(task) == record:
        failing[task] = [record[0], True]
        _write(state)
    _show(
        _("**For the check that failed**, `{check}`:", check=record[0])
        + f"\n\n{text}\n\n*"
        + _('`hint("{task}")` again goes on with the task\'s hints.', task=task)
        + "*"
    )
    return True


def _show(text: str) -> None:
    from grader.notebook.display import in_kernel

    if in_kernel():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)
