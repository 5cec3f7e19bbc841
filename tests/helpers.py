"""Shared test helpers: grade a solution, or a mutant of it, with real runs."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import tempfile

import psutil
import pytest

from grader.checks import Report
from grader.runner import run_checks
from grader.exercises import get_exercise
from grader.submission import read_notebook, read_python_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Sandboxed grading's tests: skipped, saying why, only where bubblewrap is missing outside CI (CI installs it).
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="the grading sandbox needs bubblewrap (apt-get install bubblewrap; .ci/ installs it)",
)


def solution_notebook(exercise_id: str) -> str:
    return os.path.join(ROOT, "solutions", exercise_id, f"{exercise_id}.ipynb")


def solution_source(exercise_id: str) -> str:
    """The answer cells of the solution notebook, as one Python file."""
    return "\n\n".join(cell.source for cell in read_notebook(solution_notebook(exercise_id)).cells)


def mutate(source: str, old: str, new: str) -> str:
    """The solution with one typical mistake put in (the test fails loudly if
    the solution no longer contains `old`)."""
    assert old in source, f"mutant anchor not found in the solution: {old!r}"
    return source.replace(old, new, 1)


def mutated_solution(exercise_id: str, changes: dict[str, str]) -> str:
    """The solution's answers with each `old: new` of changes applied (each old found exactly once)."""
    source = solution_source(exercise_id)
    for old, new in changes.items():
        source = mutate(source, old, new)
    return source


def replace_definition(source: str, name: str, code: str) -> str:
    """The solution with the top-level function or class `name` replaced by `code` (a whole
    wrong answer, e.g. the laziest one)."""
    import ast
    import textwrap

    nodes = [n for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
    assert nodes, f"no top-level definition of {name!r} in the solution"
    node = nodes[-1]
    lines = source.splitlines(keepends=True)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    return "".join(lines[:start]) + textwrap.dedent(code).strip() + "\n" + "".join(lines[node.end_lineno :])


def grade_source(
    exercise_id: str,
    source: str,
    task: str | None = None,
    world_size: int = 2,
    timeout: float = 30.0,
    checks: list[str] | None = None,
) -> Report:
    """Grade `source` (Python defining the tasks) with real runs: every check, one task's, or
    only the named checks (a deadlocking mutant then costs one timeout, not one per check)."""
    exercise = get_exercise(exercise_id)
    if checks is not None:
        exercise = copy.copy(exercise)
        exercise.checks = [c for c in exercise.checks if c.name in checks]
        unknown = set(checks) - {c.name for c in exercise.checks}
        assert not unknown, f"no such checks in {exercise_id}: {sorted(unknown)}"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "submission.py")
        with open(path, "w") as f:
            f.write(source)
        submission = read_python_file(path)
        return run_checks(exercise, submission, task=task, world_size=world_size, timeout=timeout)


@functools.cache
def graded_once(exercise_id: str, source: str, checks: tuple[str, ...]) -> Report:
    """grade_source's report on `source` with the named checks, graded once per test process: the tests of a file
    that grade the same mutant with the same checks share that grading (they read the report, never change it)."""
    return grade_source(exercise_id, source, checks=list(checks))


def graded_counting_launches(exercise_id: str, source: str, task: str | None, hidden: bool) -> tuple[Report, list]:
    """The checks of `task` (None: every task), public or hidden, graded on `source`, and the rank function of each
    launch they made, in order (a launch of several declared runs, grader/shared_runs.py, shows as `_in_rank_parts`)."""
    from grader import shared_runs

    launched = []
    original = shared_runs.run_distributed

    def counted(fn, world_size, args, *rest, **options):
        launched.append(getattr(args[1], "__name__", args[1]))  # (submission, check's rank function, its arguments)
        return original(fn, world_size, args, *rest, **options)

    shared_runs.run_distributed = counted
    try:
        names = [c.name for c in get_exercise(exercise_id).checks_for(task, hidden=hidden)]
        return grade_source(exercise_id, source, checks=names, timeout=60), launched
    finally:
        shared_runs.run_distributed = original


def failed(report: Report) -> dict[str, str]:
    """check name -> message, for the checks that failed."""
    return {c.name: c.message for c in report.checks if not c.passed}


def graded_mutants_fixture(exercise_id: str, task: str, mutants: dict, checks: list[str]):
    """A module-scoped fixture: name -> the Report of each mutant of `mutants` (name -> (changes, check, phrase);
    changes: {old: new} in the solution, or a whole new definition of `task`), graded once on `checks`, so that
    several tests read one grading per mutant. Use it as `graded = graded_mutants_fixture(...)` in a test module,
    with assert_fails_its_check in the test of each mutant."""

    @pytest.fixture(scope="module")
    def graded() -> dict[str, Report]:
        reports = {}
        for name, (changes, _check, _phrase) in mutants.items():
            source = (
                replace_definition(solution_source(exercise_id), task, changes)
                if isinstance(changes, str)
                else mutated_solution(exercise_id, changes)
            )
            reports[name] = grade_source(exercise_id, source, task=task, timeout=60, checks=checks)
        return reports

    return graded


def assert_fails_its_check(report: Report, check: str, phrase: str) -> None:
    """`check` failed in `report`, with `phrase` in its message (the mistake named)."""
    messages = failed(report)
    assert check in messages, "\n".join(report.lines())
    assert phrase in messages[check], messages[check]


POINTERS = (  # how a check that does not state the reason itself begins or ends (grader/reasons.py, grader/runner.py)
    re.compile(r"^depends on `\w+`, which failed: fix that first$"),
    re.compile(r"already hung in \w+ \(above, with the stacks\)", re.M),
    re.compile(r"the same run failed the same way in \w+ \(above", re.M),
)


def stating_reasons(report: Report) -> list[str]:
    """The failed checks that state a reason themselves (the others point to one of them); a check skipped on this
    machine (it says why it did not run) states no mistake."""
    return [
        c.name
        for c in report.checks
        if not c.passed and not c.skipped and not any(p.search(c.message) for p in POINTERS)
    ]


def assert_said_once(report: Report) -> None:
    """A report of one mistake: exactly one failed check states the reason, whichever it is."""
    assert len(stating_reasons(report)) == 1, "checks stating a reason:\n" + "\n".join(report.lines())


def assert_one_reason(report: Report, stated_by: str) -> None:
    """Exactly one failed check states the reason (`stated_by`); every other failed check only points to it."""
    messages = failed(report)
    assert stated_by in messages, f"{stated_by} passed; results:\n" + "\n".join(report.lines())
    stating = stating_reasons(report)
    assert stating == [stated_by], "checks stating a reason: " + ", ".join(stating) + "\n" + "\n".join(report.lines())
    skipped = {c.name for c in report.checks if c.skipped}
    for name, message in messages.items():
        if name != stated_by and name not in skipped:
            assert f"`{stated_by}`" in message or f"in {stated_by} (above" in message, (name, message)


def graded_answers(
    exercise_id: str, task: str, answers: dict[str, str | None], checks_of=lambda name: None
) -> dict[str, tuple[Report, dict[str, str]]]:
    """Each answer to `task` (name -> its code, None for the solution's) graded in the solution, on `task`'s
    checks (or checks_of(name), when not None): name -> (report, failed(report))."""
    solution = solution_source(exercise_id)
    out = {}
    for name, code in answers.items():
        source = solution if code is None else replace_definition(solution, task, code)
        report = grade_source(exercise_id, source, task=task, checks=checks_of(name))
        out[name] = (report, failed(report))
    return out


def failure_of(exercise_id: str, source: str, task: str, check: str, timeout: float = 5.0) -> str:
    """The message of `check` (one of `task`'s), graded alone on `source`, which must fail it."""
    report = grade_source(exercise_id, source, task=task, timeout=timeout, checks=[check])
    bad = failed(report)
    assert check in bad, "\n".join(report.lines())
    return bad[check]


def assert_lazy_answer_earns_nothing(exercise_id: str, task: str, code: str, phrase: str) -> None:
    """The solution with `task` replaced by the lazy `code` earns no point on that task, and a
    failed check's message contains `phrase` (it names the mistake)."""
    report = grade_source(exercise_id, replace_definition(solution_source(exercise_id), task, code), task=task)
    paying = [f"{c.name} ({c.points:g})" for c in report.checks if c.points]
    assert not paying, f"the lazy {task} earned points in {paying}:\n" + "\n".join(report.lines())
    assert any(phrase in m for m in failed(report).values()), "\n".join(report.lines())


def probe_report(result: dict) -> dict:
    """What a sandbox probe answer (its pick_device) reported, from its public check's message in a graded result."""
    for check in result["report"]["checks"]:
        found = re.search(r"PROBE (\{.*?\})\s*$", check["message"], re.M)
        if check["task"] == "pick_device" and not check["hidden"] and found:
            return json.loads(found.group(1))
    raise AssertionError(f"no probe report in {[c['message'][-300:] for c in result['report']['checks']]}")


def live_with_marker(marker: str) -> list[psutil.Process]:
    """The live (not zombie) processes whose command line holds `marker` (what a probe left behind)."""
    return [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


# exercise 2's save_checkpoint with a barrier only rank 0 reaches: a hang every message test of it shares
BARRIER_ON_RANK_0_ONLY = """
    def save_checkpoint(model, path):
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
            dist.barrier()  # only rank 0 waits
    """
