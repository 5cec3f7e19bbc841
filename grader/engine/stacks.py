"""Tracebacks and stacks, with the student's own frames first.

A frame is "the student's" when it is not in the standard library, in an
installed package, or in the grader itself: a notebook cell, a submission
file, a kernel-defined function.
"""

from __future__ import annotations

import linecache
import os
import re
import sysconfig
import traceback

from grader.i18n import _, ngettext


_GRADER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(
    {
        os.path.abspath(p)
        for p in (
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
            _GRADER_DIR,
        )
        if p
    }
)


def is_student_file(filename: str) -> bool:
    if filename.startswith("<frozen") or filename in ("<string>",):
        return False
    if filename.startswith("<"):  # "<cell 3>" and similar, compiled from a submission
        return True
    path = os.path.abspath(filename)
    return not path.startswith(_LIBRARY_DIRS) and "site-packages" not in path


def _frame_line(filename: str, lineno: int, name: str, line: str | None) -> str:
    code = (line or linecache.getline(filename, lineno) or "").strip()
    where = _("{file}, line {line}, in {function}", file=filename, line=lineno, function=name)
    return f"{where}: {code}" if code else where


_TRACEBACK_FILE = re.compile(r'File "([^"]+)"')


def _verdict_or_name(kind: type) -> str:
    """ "CheckFailed" for the grader's verdicts, its subclasses too (a rank's check that failed), else the name."""
    is_verdict = any(c.__name__ == "CheckFailed" and c.__module__ == "grader.checks" for c in kind.__mro__)
    return "CheckFailed" if is_verdict else kind.__name__


def describe_exception(exc: BaseException) -> dict:
    """A picklable summary of an exception raised in a rank."""
    tb = traceback.TracebackException.from_exception(exc)
    while tb.stack and tb.stack[0].filename.endswith(os.path.join("engine", "worker.py")):
        tb.stack.pop(0)  # the engine's own frame is noise for the student
    frames = list(tb.stack)
    student = [_frame_line(f.filename, f.lineno, f.name, f.line) for f in frames if is_student_file(f.filename)]
    text = _TRACEBACK_FILE.sub(lambda m: f'File "{course_path(m[1])}"', "".join(tb.format()))
    return {
        "type": _verdict_or_name(type(exc)),
        "message": str(exc),
        "student_frames": student,
        "traceback": text,
    }


def format_exception(info: dict) -> str:
    """The error and the student's frames; the full traceback only when
    none of its frames is the student's."""
    lines = [f"{info['type']}: {info['message']}".rstrip(": ")]
    if info.get("student_frames"):
        lines.append(_("in your code (most recent call last):"))
        lines += [f"  {f}" for f in info["student_frames"]]
    else:  # not in the student's code: the whole traceback is the clue
        lines.append(info["traceback"].rstrip())
    return "\n".join(lines)


_FRAME = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>\S+)')
_TORCH_DIR = os.sep + "torch" + os.sep


def _main_frames(dump: str) -> list[dict]:
    """The main thread's frames, most recent first, without the launcher's own (forkserver, worker.main).

    faulthandler lists the most recent call first; the main thread is the one
    marked 'Current thread' or, in a signal dump, the last one listed.
    """
    threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump.strip())
    main = next((t for t in threads if "Current thread" in t), threads[-1] if threads else "")
    frames = [m.groupdict() for m in (_FRAME.match(line) for line in main.splitlines()) if m]
    engine = [i for i, f in enumerate(frames) if f["file"].endswith(os.path.join("engine", "worker.py"))]
    return frames[: engine[0]] if engine else frames


def frame_strings(dump: str) -> list[str]:
    """The file names and function names a stack dump holds (a rank's own: any text it chose)."""
    return [
        f[key] for f in (m.groupdict() for m in map(_FRAME.match, dump.splitlines()) if m) for key in ("file", "name")
    ]


def busy_frame(dump: str) -> dict | None:
    """The student's frame a hung rank is running in, when it is busy in the student's own code (a loop,
    a sleep, a wait on a file) rather than waiting inside torch (a collective, a backward's all-reduce).

    The innermost frame that is torch's or the student's decides; standard-library frames in between
    (time, os.path, threading) are skipped, the grader's own frames end the search.
    """
    for f in _main_frames(dump):
        if _TORCH_DIR in os.path.abspath(f["file"]):
            return None
        if is_student_file(f["file"]):
            return f
        if os.path.abspath(f["file"]).startswith(_GRADER_DIR):
            return None
    return None


def student_frame_line(frame: dict) -> str:
    return _frame_line(frame["file"], int(frame["line"]), frame["name"], None).replace(
        frame["file"], course_path(frame["file"]), 1
    )


_COURSE_DIR = os.path.dirname(_GRADER_DIR)
_CELL = re.compile(r"^<[Cc]ell (\S+)>$")  # a cell of a notebook read from disk (<cell 29>) or a kernel's (<Cell In[7]>)


def course_path(filename: str) -> str:
    """A frame's file as the student knows it: "cell 29" for a notebook cell, a path relative to the course
    (grader/...), or to the installed packages (torch/...), never absolute."""
    cell = _CELL.match(filename)
    if cell:
        return _("cell {cell}", cell=cell[1])
    if filename.startswith("<"):
        return filename
    path = os.path.abspath(filename)
    for root in sorted(_LIBRARY_DIRS, key=len, reverse=True):
        if root != _GRADER_DIR and path.startswith(root + os.sep):
            return os.path.relpath(path, root)
    if "site-packages" + os.sep in path:
        return path.split("site-packages" + os.sep, 1)[1]
    if path.startswith(_COURSE_DIR + os.sep):
        return os.path.relpath(path, _COURSE_DIR)
    return os.path.basename(path)


def place(filename: str, line: int) -> str:
    """ "cell 29, line 4" (a notebook cell) or "grader/grading.py:75"."""
    shown = course_path(filename)
    if _CELL.match(filename) or is_student_file(filename):
        return _("{file}, line {line}", file=shown, line=line)
    return f"{shown}:{line}"


def fold_frames(frames: list[tuple[str, int, str]]) -> str:
    """The student's frames first, one a line (most recent call last), with their code; every other frame
    (the grader's, torch's) folded into one line. frames: (file, line, function), innermost first."""
    mine = [f for f in reversed(frames) if is_student_file(f[0])]
    others = [f for f in reversed(frames) if not is_student_file(f[0])]
    lines = [_("your code (most recent call last):") if mine else _("(none of these frames is in your code)")]
    lines += ["  " + _frame_line(f[0], f[1], f[2], None).replace(f[0], course_path(f[0]), 1) for f in mine]
    if others:
        folded = ", ".join(f"{place(f[0], f[1])} {f[2]}" for f in others)
        lines.append(
            "  ["
            + ngettext(
                "{n} frame of the grader and torch, folded: {frames}",
                "{n} frames of the grader and torch, folded: {frames}",
                len(others),
                frames=folded,
            )
            + "]"
        )
    return "\n".join(lines)


def summarize_stack(dump: str) -> str:
    """Turn a faulthandler dump into 'waiting in X, called from your code at Y', or 'busy in your code
    at Y' when the rank is not waiting inside torch; then its frames, the student's first (fold_frames)."""
    frames = _main_frames(dump)
    if not frames:
        return dump.strip() or _("(no stack: the process did not answer)")
    innermost = frames[0]
    busy = busy_frame(dump)
    if busy is not None:
        parts = [_("busy in your code at {line}", line=student_frame_line(busy))]
    else:
        student = [f for f in frames if is_student_file(f["file"])]
        where = f"{os.path.basename(innermost['file'])}:{innermost['line']}"
        parts = [_("waiting in {function} ({place})", function=innermost["name"], place=where)]
        if student:
            parts.append(_("called from your code at {line}", line=student_frame_line(student[0])))
    return ", ".join(parts) + "\n" + fold_frames([(f["file"], int(f["line"]), f["name"]) for f in frames])


def main_frames(dump: str) -> list[tuple[str, int, str]]:
    """A dump's main-thread frames as (file, line, function), innermost first."""
    return [(f["file"], int(f["line"]), f["name"]) for f in _main_frames(dump)]


_COLLECTIVE_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+)")


def collective_timeout(error: dict | None) -> str | None:
    """The operation ("send", "recv", ...) when a rank's error is gloo's own timeout of a collective:
    the rank was waiting for peers that never came, a hang, not a crash of the student's code."""
    match = _COLLECTIVE_TIMEOUT.search((error or {}).get("message", ""))
    return match["op"] if match else None
