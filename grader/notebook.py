"""check("task") inside a notebook.

    from grader.notebook import checker
    check = checker("02_ddp_basics")
    check("wrap_model")          # ✓/✗ per check; AssertionError when any fails

The code checked is what is defined in the kernel *now* (serialized by value),
not the saved file, so the same line works while editing and as an nbgrader
test cell.

In a Jupyter kernel the result is one rich output (HTML, with a plain-text
twin holding the same ✓/✗ lines) that fills in as each check finishes: the
targeted message under each ✗, and what each rank printed, folded when long.
Nothing is ever written to stderr: nbgrader gives 0 points to a test cell
whose outputs contain a stderr stream, so warnings and stray output of the
grader's own processes are captured and shown folded instead.
"""
from __future__ import annotations

import contextlib
import html
import io
import os
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from grader.checks import Check, CheckResult, Exercise, Grading, _run_one
from grader.engine import warm_up
from grader.exercises import get_exercise
from grader.submission import LoadReport, PickledSubmission, from_namespace

SHOWN_OUTPUT_LINES = 8  # a rank's output longer than this is folded
SHOWN_MESSAGE_LINES = 30  # a longer failure message (a deep stack) shows its head, the rest folded


def checker(exercise_id: str, world_size: int = 2, timeout: float = 30.0):
    exercise = get_exercise(exercise_id)
    earned: dict[tuple[str, bool], float] = {}  # (task, hidden) -> points, for nbgrader's partial credit

    def check(task: str, hidden: bool = False, namespace: dict | None = None) -> float | None:
        checks = exercise.checks_for(task, hidden)  # ValueError naming the tasks for a typo
        ns = namespace if namespace is not None else vars(sys.modules["__main__"])
        view = _View(task, len(checks), rich=_in_kernel())
        with _captured_stderr() as stray:
            submission = from_namespace(ns, exercise.tasks)
            results = run_task_checks(exercise, submission, checks, world_size, timeout, on_result=view.add)
        view.finish(stray.text())
        failed = [r.name for r in results if not r.passed]
        earned[task, hidden] = sum(r.points for r in results)
        if os.environ.get("NBGRADER_EXECUTION") == "autograde":
            # nbgrader's autograde reads a number as the cell's partial credit: the task's points so
            # far (the hidden tests' call comes last in the cell, so it returns visible + hidden)
            return _Points(earned.get((task, False), 0) + earned.get((task, True), 0))
        if failed:
            raise ChecksFailed(f"{task}: {len(failed)} of {_plural(len(results), 'check')} failed "
                               f"({', '.join(failed)}); the reasons are shown above") from None
        # nothing returned: the last line of a cell would print it under the ✓ lines

    return check


class _Points(float):
    def __repr__(self) -> str:
        return f"{float(self):g}"


class ChecksFailed(AssertionError):
    """Some check of the task failed (nbgrader then gives the check cell 0 points)."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows these lines instead of a traceback through the grader: the
        # reasons are in the output above, the grader's frames would only bury them.
        return [f"\x1b[31mAssertionError\x1b[0m: {self}"]


# --- running ------------------------------------------------------------------------

@dataclass
class TaskResult(CheckResult):
    """A CheckResult plus what each rank printed during the check's runs."""

    outputs: list[list[str]] = field(default_factory=list)  # one list per run, one string per rank


class _RecordingGrading(Grading):
    """A Grading that keeps each run's per-rank output (RankReport.output) and,
    when checks run side by side, lets the others' parent-side code run only
    while this one waits for its ranks (see run_task_checks)."""

    def __init__(self, *args, parent_lock: threading.Lock | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.outputs: list[list[str]] = []
        self.parent_lock = parent_lock

    def run_raw(self, *args, **kwargs):
        if self.parent_lock:
            self.parent_lock.release()
        try:
            result = super().run_raw(*args, **kwargs)
        finally:
            if self.parent_lock:
                self.parent_lock.acquire()
        self.outputs.append([r.output for r in result.ranks])
        return result


SIDE_BY_SIDE = 3  # checks of one task run at once: their ranks mostly wait (sleeps, barriers, startup)
ONE_AT_A_TIME = {"04_torchrun"}  # real torchrun agents: seconds of CPU each; side by side they crowd 2 cores


_warm = False


def _warm_parent() -> None:
    """Once per kernel, inside the first check's output capture: start the engine's
    forkserver, and import here too what the forkserver preloads for the ranks
    (torch._dynamo and friends, about 1 s, otherwise paid by the first check whose
    reference steps an optimizer). The two overlap: the forkserver is a separate process."""
    global _warm
    if not _warm:
        warm_up()
        import grader.engine.preload  # noqa: F401
        _warm = True


def run_task_checks(exercise: Exercise, submission, checks: list[Check], world_size: int = 2,
                    timeout: float = 30.0, on_result=None) -> list[TaskResult]:
    """Run `checks` on the submission, like grader.checks.run_checks, keeping the ranks' output.

    Two savings make a task's check cell return in about the time of its
    slowest check. A kernel submission skips the preflight run: its
    definitions are known without executing anything (an object that cannot be
    rebuilt in a rank still fails its own checks, with the reason). And the
    checks run side by side, in threads: the parent-side part of a check (its
    single-process reference, seeded through torch's global RNG) holds a lock,
    released only while the check waits for its ranks, so references never
    interleave; only the multi-process runs overlap.
    """
    _warm_parent()
    if isinstance(submission, PickledSubmission):
        load_report, load_failure = LoadReport(list(submission.blobs), list(submission.problems)), None
    else:
        first = Grading(submission, world_size, timeout)
        first.preflight()
        load_report, load_failure = first.load_report, first.load_failure
    parallel = min(len(checks), 1 if exercise.id in ONE_AT_A_TIME else SIDE_BY_SIDE)
    lock = threading.Lock() if parallel > 1 else None

    def one(check: Check) -> TaskResult:
        grading = _RecordingGrading(submission, world_size, timeout, parent_lock=lock)
        grading.load_report, grading.load_failure = load_report, load_failure
        with lock or contextlib.nullcontext():
            result = _run_one(check, grading)
        return TaskResult(**vars(result), outputs=grading.outputs)

    results = []
    pool = ThreadPoolExecutor(max(parallel, 1), thread_name_prefix="grader-check")
    try:
        for future in [pool.submit(one, check) for check in checks]:  # reported in the checks' order
            results.append(future.result())
            if on_result:
                on_result(results[-1])
    finally:
        # Interrupted (the kernel's stop button): return now; runs already started end within their timeout.
        pool.shutdown(wait=False, cancel_futures=True)
    return results


# --- no stderr in the cell ------------------------------------------------------------

class _Stray:
    def __init__(self):
        self.python = io.StringIO()
        self.caught: list[warnings.WarningMessage] = []
        self.fd_text = ""

    def text(self) -> str:
        parts = [self.python.getvalue(), self.fd_text]
        parts += [f"{w.category.__name__}: {w.message} ({os.path.basename(w.filename)}:{w.lineno})"
                  for w in self.caught]
        return "\n".join(p.strip("\n") for p in parts if p.strip())


_fd_log: int | None = None  # one append-only file per kernel; the forkserver keeps it as its stderr


@contextlib.contextmanager
def _captured_stderr():
    """Python warnings and stderr writes, and in a kernel also file descriptors 1
    and 2 (where processes started now, like the engine's forkserver, write),
    go to a buffer instead of the cell's stderr stream."""
    global _fd_log
    stray = _Stray()
    redirect_fds = _in_kernel()
    saved, start = [], 0
    if redirect_fds:
        if _fd_log is None:
            path = tempfile.mktemp(prefix="grader-kernel-", suffix=".log")
            _fd_log = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)  # appends stay whole
            os.unlink(path)
        start = os.fstat(_fd_log).st_size
        for fd in (1, 2):
            saved.append(os.dup(fd))
            os.dup2(_fd_log, fd)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stray.python):
            yield stray
        stray.caught = list(caught)
    finally:
        if redirect_fds:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
            size = os.fstat(_fd_log).st_size
            stray.fd_text = os.pread(_fd_log, min(size - start, 64_000), start).decode("utf-8", "replace")


def _in_kernel() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return getattr(shell, "kernel", None) is not None


# --- showing the results ------------------------------------------------------------------

def rank_outputs(result: TaskResult) -> list[tuple[str, str]]:
    """(label, text) for every rank that printed something during the check."""
    runs = [run for run in getattr(result, "outputs", []) if any(o.strip() for o in run)]
    shown = []
    for i, run in enumerate(runs):
        for rank, text in enumerate(run):
            if text.strip():
                label = f"rank {rank}" + (f", run {i + 1} of {len(runs)}" if len(runs) > 1 else "")
                shown.append((label, text.rstrip("\n")))
    return shown


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


class _View:
    """The output of one check cell: printed lines, or one HTML display updated in place."""

    def __init__(self, task: str, expected: int, rich: bool):
        self.task = task
        self.expected = expected
        self.rich = rich
        self.results: list[TaskResult] = []
        self.stray = ""
        self.started = time.monotonic()
        self.done = False
        self.handle = None
        if rich:
            from IPython.display import display

            self.handle = display(self, display_id=True)

    def add(self, result: TaskResult) -> None:
        self.results.append(result)
        if self.rich:
            self.handle.update(self)
        else:
            print("\n".join(self._text_of(result)), flush=True)

    def finish(self, stray: str) -> None:
        self.done, self.stray = True, stray
        if self.rich:
            self.handle.update(self)
        elif stray:
            print("\n".join(self._stray_text()), flush=True)

    # plain text: the ✓/✗ lines, then indented rank output
    def _text_of(self, result: TaskResult) -> list[str]:
        lines = result.lines()
        for label, text in rank_outputs(result):
            out = text.splitlines()
            if len(out) > 2 * SHOWN_OUTPUT_LINES:
                out = out[:SHOWN_OUTPUT_LINES] + [f"... ({len(out) - SHOWN_OUTPUT_LINES - 4} lines left out) ..."] \
                    + out[-4:]
            lines += [f"    {label} printed:"] + ["      | " + line for line in out]
        return lines

    def _stray_text(self) -> list[str]:
        return ["    (messages from the grader's processes:)"] + ["      " + l for l in self.stray.splitlines()]

    def __repr__(self) -> str:  # text/plain: what nbgrader, tests and text-only front ends read
        lines = [line for r in self.results for line in self._text_of(r)]
        if not self.done:
            lines.append(f"... checking {self.task}: {len(self.results)} of {self.expected} done")
        elif self.stray:
            lines += self._stray_text()
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [self._html_of(r) for r in self.results]
        if not self.done:
            rows.append(f'<div style="color:var(--jp-ui-font-color2,#777)">⋯ checking {html.escape(self.task)}: '
                        f"{len(self.results)} of {_plural(self.expected, 'check')} done</div>")
        else:
            passed = sum(r.passed for r in self.results)
            points = sum(r.points for r in self.results)
            total = sum(r.max_points for r in self.results)
            seconds = time.monotonic() - self.started
            rows.append(f'<div style="color:var(--jp-ui-font-color2,#777);margin-top:2px">{html.escape(self.task)}: '
                        f"{passed} of {_plural(len(self.results), 'check')} pass, {points:g}/{total:g} points, "
                        f"{seconds:.1f} s</div>")
            if self.stray:
                rows.append(_folded("messages from the grader's processes (not your code)", self.stray, open_=False))
        return ('<div class="grader-check" style="font-family:var(--jp-code-font-family,monospace);'
                'font-size:var(--jp-code-font-size,13px);line-height:1.45">' + "".join(rows) + "</div>")

    @staticmethod
    def _html_of(result: TaskResult) -> str:
        head = html.escape(result.lines()[0])
        color = "var(--jp-success-color1,#2e7d32)" if result.passed else "var(--jp-error-color1,#c62828)"
        parts = [f'<div class="grader-{"pass" if result.passed else "fail"}" style="color:{color}">{head}</div>']
        if not result.passed:
            message = result.message.splitlines()
            shown, rest = message[:SHOWN_MESSAGE_LINES], message[SHOWN_MESSAGE_LINES:]
            parts.append(f'<pre class="grader-message" style="margin:0 0 4px 2em;white-space:pre-wrap;'
                         f'background:none;padding:0">{html.escape(chr(10).join(shown))}</pre>')
            if rest:
                parts.append(_folded(f"{len(rest)} more lines", "\n".join(rest), open_=False))
        for label, text in rank_outputs(result):
            n = len(text.splitlines())
            parts.append(_folded(f"{label} printed {_plural(n, 'line')}", text, open_=n <= SHOWN_OUTPUT_LINES))
        return "".join(parts)


def _folded(summary: str, text: str, open_: bool) -> str:
    return (f'<details style="margin:0 0 4px 2em"{" open" if open_ else ""}>'
            f'<summary style="cursor:pointer;color:var(--jp-ui-font-color2,#777)">{html.escape(summary)}</summary>'
            f'<pre style="margin:0;max-height:24em;overflow:auto;white-space:pre-wrap">{html.escape(text)}</pre>'
            "</details>")
