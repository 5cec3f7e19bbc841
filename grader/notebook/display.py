"""How check() and show_progress() show themselves in a notebook.

- captured_stderr(): nothing reaches the cell's stderr (nbgrader gives 0 points to
  a test cell with a stderr stream): warnings and the grader's processes' output
  are kept and shown folded instead;
- CheckView: one rich output per check cell (HTML with a plain-text twin) that
  fills in as each check finishes: ✓/✗, the message under each ✗, what each rank
  printed (folded when long), and the hardware plan the checks ran on.
"""

from __future__ import annotations

import contextlib
import html
import io
import os
import sys
import tempfile
import time
import warnings

from grader.checks import CheckResult
from grader.i18n import _, ngettext

SHOWN_OUTPUT_LINES = 8  # a rank's output longer than this is folded
SHOWN_MESSAGE_LINES = 30  # a longer failure message (a deep stack) shows its head, the rest folded


# --- no stderr in the cell ------------------------------------------------------------


class _Stray:
    def __init__(self):
        self.python = io.StringIO()
        self.caught: list[warnings.WarningMessage] = []
        self.fd_text = ""

    def text(self) -> str:
        parts = [self.python.getvalue(), self.fd_text]
        parts += [
            f"{w.category.__name__}: {w.message} ({os.path.basename(w.filename)}:{w.lineno})" for w in self.caught
        ]
        return "\n".join(p.strip("\n") for p in parts if p.strip())


_fd_log: int | None = None  # one append-only file per kernel; the forkserver keeps it as its stderr


@contextlib.contextmanager
def captured_stderr():
    """Python warnings and stderr writes, and in a kernel also file descriptors 1
    and 2 (where processes started now, like the engine's forkserver, write),
    go to a buffer instead of the cell's stderr stream."""
    global _fd_log
    stray = _Stray()
    redirect_fds = in_kernel()
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


def in_kernel() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return getattr(shell, "kernel", None) is not None


# --- showing the results ------------------------------------------------------------------


def rank_outputs(result: CheckResult) -> list[tuple[str, str]]:
    """(label, text) for every rank that printed something during the check."""
    runs = [run for run in getattr(result, "outputs", []) if any(o.strip() for o in run)]
    shown = []
    for i, run in enumerate(runs):
        for rank, text in enumerate(run):
            if text.strip():
                label = (
                    _("rank {rank}, run {run} of {runs}", rank=rank, run=i + 1, runs=len(runs))
                    if len(runs) > 1
                    else _("rank {rank}", rank=rank)
                )
                shown.append((label, text.rstrip("\n")))
    return shown


class CheckView:
    """The output of one check cell: printed lines, or one HTML display updated in place."""

    def __init__(self, task: str, expected: int, rich: bool, hidden_points: float = 0):
        self.task = task
        self.hidden_points = hidden_points  # the task's points in hidden tests, said under the visible ones
        self.expected = expected
        self.rich = rich
        self.results: list[CheckResult] = []
        self.stray = ""
        self.started = time.monotonic()
        self.done = False
        self.handle = None
        if rich:
            from IPython.display import display

            self.handle = display(self, display_id=True)

    def add(self, result: CheckResult) -> None:
        self.results.append(result)
        if self.rich:
            self.handle.update(self)
        else:
            print("\n".join(self._text_of(result)), flush=True)

    def finish(self, stray: str) -> None:
        self.done, self.stray = True, stray
        if self.rich:
            self.handle.update(self)
        else:
            if self.plans():
                print("    " + self._ran_on(), flush=True)
            if self.hidden_points:
                print("    " + self._hidden_note(), flush=True)
            if stray:
                print("\n".join(self._stray_text()), flush=True)

    # plain text: the ✓/✗ lines, then indented rank output
    def _text_of(self, result: CheckResult) -> list[str]:
        lines = result.lines()
        for label, text in rank_outputs(result):
            out = text.splitlines()
            if len(out) > 2 * SHOWN_OUTPUT_LINES:
                left_out = _("... ({n} lines left out) ...", n=len(out) - SHOWN_OUTPUT_LINES - 4)
                out = out[:SHOWN_OUTPUT_LINES] + [left_out] + out[-4:]
            lines += ["    " + _("{label} printed:", label=label)] + ["      | " + line for line in out]
        return lines

    def _stray_text(self) -> list[str]:
        return ["    " + _("(messages from the grader's processes:)")] + ["      " + l for l in self.stray.splitlines()]

    def _hidden_note(self) -> str:
        return ngettext(
            "(and {points:g} point of {task} in hidden tests, graded after you submit)",
            "(and {points:g} points of {task} in hidden tests, graded after you submit)",
            2 if self.hidden_points != 1 else 1,
            points=self.hidden_points,
            task=self.task,
        )

    def _ran_on(self) -> str:
        return _("(ran on: {plans})", plans=self.plans())

    def plans(self) -> str:
        """The hardware plans the checks ran on, e.g. '2 ranks, gloo on CPU (no GPU visible)'."""
        seen = []
        for r in self.results:
            for plan in filter(None, r.plan.split("; ")):
                if plan not in seen:
                    seen.append(plan)
        return "; ".join(seen)

    def __repr__(self) -> str:  # text/plain: what nbgrader, tests and text-only front ends read
        lines = [line for r in self.results for line in self._text_of(r)]
        if not self.done:
            lines.append(
                _(
                    "... checking {task}: {done} of {expected} done",
                    task=self.task,
                    done=len(self.results),
                    expected=self.expected,
                )
            )
        else:
            if self.plans():
                lines.append("    " + self._ran_on())
            if self.hidden_points:
                lines.append("    " + self._hidden_note())
            if self.stray:
                lines += self._stray_text()
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [self._html_of(r) for r in self.results]
        if not self.done:
            rows.append(
                '<div style="color:var(--jp-ui-font-color2,#777)">⋯ '
                + html.escape(
                    ngettext(
                        "checking {task}: {done} of {n} check done",
                        "checking {task}: {done} of {n} checks done",
                        self.expected,
                        task=self.task,
                        done=len(self.results),
                    )
                )
                + "</div>"
            )
        else:
            passed = sum(r.passed for r in self.results)
            points = sum(r.points for r in self.results)
            total = sum(r.max_points for r in self.results)
            seconds = time.monotonic() - self.started
            summary = ngettext(
                "{task}: {passed} of {n} check pass, {points:g}/{total:g} points, {seconds:.1f} s",
                "{task}: {passed} of {n} checks pass, {points:g}/{total:g} points, {seconds:.1f} s",
                len(self.results),
                task=self.task,
                passed=passed,
                points=points,
                total=total,
                seconds=seconds,
            )
            if self.plans():
                summary += _("; ran on {plans}", plans=self.plans())
            if self.hidden_points:
                summary += " " + self._hidden_note()
            rows.append(
                '<div style="color:var(--jp-ui-font-color2,#777);margin-top:2px">' + html.escape(summary) + "</div>"
            )
            if self.stray:
                rows.append(_folded(_("messages from the grader's processes (not your code)"), self.stray, open_=False))
        return (
            '<div class="grader-check" style="font-family:var(--jp-code-font-family,monospace);'
            'font-size:var(--jp-code-font-size,13px);line-height:1.45">' + "".join(rows) + "</div>"
        )

    @staticmethod
    def _html_of(result: CheckResult) -> str:
        head = html.escape(result.lines()[0])
        color = "var(--jp-success-color1,#2e7d32)" if result.passed else "var(--jp-error-color1,#c62828)"
        parts = [f'<div class="grader-{"pass" if result.passed else "fail"}" style="color:{color}">{head}</div>']
        if not result.passed:
            message = result.message.splitlines()
            shown, rest = message[:SHOWN_MESSAGE_LINES], message[SHOWN_MESSAGE_LINES:]
            parts.append(
                f'<pre class="grader-message" style="margin:0 0 4px 2em;white-space:pre-wrap;'
                f'background:none;padding:0">{html.escape(chr(10).join(shown))}</pre>'
            )
            if rest:
                parts.append(
                    _folded(ngettext("{n} more line", "{n} more lines", len(rest)), "\n".join(rest), open_=False)
                )
        for label, text in rank_outputs(result):
            n = len(text.splitlines())
            parts.append(
                _folded(
                    ngettext("{label} printed {n} line", "{label} printed {n} lines", n, label=label),
                    text,
                    open_=n <= SHOWN_OUTPUT_LINES and not _abort_text(text),
                )
            )
        return "".join(parts)


def _abort_text(text: str) -> bool:
    """A C++ library's last words (gloo's enforce, an uncaught C++ exception): raw, the message says it first."""
    return "terminate called after throwing" in text or "EnforceNotMet" in text


def _folded(summary: str, text: str, open_: bool) -> str:
    return (
        f'<details style="margin:0 0 4px 2em"{" open" if open_ else ""}>'
        f'<summary style="cursor:pointer;color:var(--jp-ui-font-color2,#777)">{html.escape(summary)}</summary>'
        f'<pre style="margin:0;max-height:24em;overflow:auto;white-space:pre-wrap">{html.escape(text)}</pre>'
        "</details>"
    )
