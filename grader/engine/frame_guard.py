"""Inside a rank: refuse the student's code the frames of the call stack, where the grader's frames live.

A check's rank function calls the student's function; every frame above that call is the grader's. Checks call
the student before they compute what they compare with, but a frame still holds the task's inputs, the check's
arguments and the engine's state. So once installed (in untrusted runs, before the answers load), a Python audit
hook, which no code can remove, refuses from the student's code:

- `sys._getframe` and `sys._current_frames` (and so `inspect.currentframe`, `inspect.stack`, `traceback.walk_stack`);
- a traceback's, generator's or coroutine's frame (`tb_frame`, `gi_frame`, ...), and `inspect.trace`;
- `sys.settrace` / `sys.setprofile` (a trace function is handed every frame) and `gc.get_referrers`.

Each refusal raises `FrameWalk` in the student's code and is remembered: the integrity guard then fails the run,
saying so (integrity.Guard.verify), even when the student's code caught the error. The requester is the first
frame outside inspect.py and traceback.py: torch or the standard library asking for frames (logging finds its
caller, the traceback module formats an exception) is not refused, and printing a traceback stays possible.
What this cannot see: a frame handed over by a signal handler, and code compiled under a library's file name.
"""

from __future__ import annotations

import inspect
import os
import site
import sys
import sysconfig
import traceback

EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_referrers"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# traceback.py's functions that hand frames back; its others format them (a printed traceback is fine)
HANDS_FRAMES = frozenset({"walk_stack", "walk_tb"})

refused: list[str] = []  # what the student's code asked for, in order (the guard reads it)
_state = {"installed": False, "inside": False, "library": (), "pass_through": (), "known": {}}


class FrameWalk(RuntimeError):
    """The student's code asked for the grader's frames."""


def _library_roots() -> tuple[str, ...]:
    """The standard library, this interpreter's site-packages, and the folder of every top-level package or module
    loaded before the answers (torch and the grader, wherever they are installed: a student venv may find them in
    another venv's site-packages)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} | set(site.getsitepackages())
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if "." not in name and where:
            package = getattr(module, "__path__", None)
            roots.add(list(package)[0] if package else os.path.dirname(where))
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def _is_library(filename: str) -> bool:
    known = _state["known"]
    if filename not in known:
        real = os.path.realpath(filename) if not filename.startswith("<") else filename
        known[filename] = filename.startswith("<frozen") or real.startswith(_state["library"])
    return known[filename]


def _requester(frame, event: str):
    """The frame that asked, past inspect.py and traceback.py; None when the request is theirs to make."""
    passing = _state["pass_through"]
    outermost = None
    while frame is not None and frame.f_code.co_filename in passing:
        outermost, frame = frame, frame.f_back
    traceback_formats = outermost is not None and outermost.f_code.co_filename.endswith("traceback.py")
    if traceback_formats and outermost.f_code.co_name not in HANDS_FRAMES and event != "sys._current_frames":
        return None
    return frame


def _hook(event: str, args: tuple) -> None:
    attribute = event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRIBUTES
    if (event not in EVENTS and not attribute) or _state["inside"]:
        return
    _state["inside"] = True
    try:
        here = inspect.currentframe()  # this hook's frame: the one that raised the event is next
        frame = _requester(here.f_back if here is not None else None, event)
        if frame is None or _is_library(frame.f_code.co_filename):
            return
        what = args[1] if attribute else event
        refused.append(f"{what} (in {frame.f_code.co_name}, {os.path.basename(frame.f_code.co_filename)})")
    finally:
        _state["inside"] = False
        here = frame = None  # a frame held by its own local is a cycle: it would keep every caller's locals alive
    raise FrameWalk(
        f"your code asked for the call stack's frames ({what}) while it was graded: the frames above your "
        "function are the grader's, and reading them is refused. Remove sys._getframe, inspect.currentframe, "
        "inspect.stack, a traceback's tb_frame, settrace/setprofile from your answers (printing a traceback "
        "with the traceback module is fine)"
    )


def install() -> None:
    """Once per process, before any student code runs: audit hooks cannot be removed."""
    if _state["installed"]:
        return
    _state["library"] = _library_roots()
    _state["pass_through"] = frozenset({inspect.__file__, traceback.__file__})
    _state["installed"] = True
    sys.addaudithook(_hook)


def report() -> str:
    """What the guard says when the student's code asked for frames ("" when it never did)."""
    if not refused:
        return ""
    shown = ", ".join(refused[:3]) + (f" and {len(refused) - 3} more" if len(refused) > 3 else "")
    return (
        f"your code asked for the grader's frames: {shown}. The frames above your function are the grader's; "
        "a check must see your code's own results, so the checks concerned score 0. Remove the code that walks "
        "the call stack (sys._getframe, inspect.currentframe/stack, tb_frame, settrace)"
    )
