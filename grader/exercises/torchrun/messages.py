"""Turning torchrun's output into short, student-facing evidence (04_torchrun)."""

from __future__ import annotations

import re

TRACEBACK_HEAD = "Traceback (most recent call last):"
# A traceback: its head, then lines up to the first unindented one that is not another head (two workers that fail
# at once write into one output, so their tracebacks interleave, line by line or even within a line).
_HEAD = re.escape(TRACEBACK_HEAD)
_TRACEBACK = re.compile(rf"^{_HEAD}\n(?:.*\n)*?(?!{_HEAD})\S.*$", re.MULTILINE)
HALF_WRITTEN_SIGNS = (
    "PytorchStreamReader",
    "failed finding central directory",
    "EOFError",
    "UnpicklingError",
    "Ran out of input",
    "file not found: archive",
)


def worker_traceback(output: str, max_lines: int = 18) -> str:
    """The first traceback of a worker (not torchrun's own ChildFailedError report)."""
    for match in _TRACEBACK.finditer(output):
        block = match.group(0)
        if "torch/distributed/run.py" in block or "ChildFailedError" in block:
            continue
        head, *rest = block.splitlines()
        lines = [head] + [line for line in rest if line != TRACEBACK_HEAD]  # another worker's head, interleaved
        if len(lines) > max_lines:
            lines = lines[:2] + ["    ..."] + lines[-(max_lines - 3) :]
        return "\n".join(lines)
    return ""


_SCRIPT_FRAME = re.compile(r'^\s*File "(?:[^"]*/)?train\.py", line (\d+) in (\S+)', re.MULTILINE)


def script_lines(output: str) -> list[str]:
    """Where each worker stood in the script when it aborted or was killed hung (the innermost train.py frame of
    each stack faulthandler printed), e.g. "train.py, line 57, in save_snapshot"."""
    found = []
    for dump in output.split("Fatal Python error:")[1:]:
        frame = _SCRIPT_FRAME.search(dump)
        where = frame and f"train.py, line {frame[1]}, in {frame[2]}"
        if where:
            found.append(where)
    return found


def evidence(output: str, timed_out: bool = False) -> str:
    """What to show under a failure: where the workers stood in the script (an abort, a hang), the worker's
    traceback, else the end of the output."""
    stood = script_lines(output)
    text = worker_traceback(output)
    if stood and not text:  # gloo's abort text, if any: faulthandler's stacks follow it
        text = "\n".join(
            line for line in output.strip().splitlines() if "terminate called" in line or "what():" in line
        )[:600]
    if not text:
        lines = [line for line in output.strip().splitlines() if line.strip()]
        text = "\n".join(lines[-12:])
    prefix = (
        "the run did not finish within its time limit and was killed, so this check pays nothing (a hang? "
        "workers waiting in different collectives? On a very busy machine, run the check again)\n"
        if timed_out
        else ""
    )
    if stood:
        counts = {where: stood.count(where) for where in stood}
        said = "; ".join(f"{n} worker{'s' if n > 1 else ''} at {where}" for where, n in counts.items())
        prefix += f"where the workers were in your script when {'killed' if timed_out else 'they stopped'}: {said}\n"
    if not text:
        return prefix.strip()
    return prefix + "torchrun's output:\n" + "\n".join("    " + line for line in text.splitlines())


def read_half_written(output: str) -> bool:
    return any(sign in output for sign in HALF_WRITTEN_SIGNS)
