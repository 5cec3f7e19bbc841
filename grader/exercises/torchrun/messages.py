"""Turning torchrun's output into short, student-facing evidence (04_torchrun)."""
from __future__ import annotations

import re

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):\n(?:.*\n)*?\S.*$", re.MULTILINE)
HALF_WRITTEN_SIGNS = ("PytorchStreamReader", "failed finding central directory", "EOFError",
                      "UnpicklingError", "Ran out of input", "file not found: archive")


def worker_traceback(output: str, max_lines: int = 18) -> str:
    """The first traceback of a worker (not torchrun's own ChildFailedError report)."""
    for match in _TRACEBACK.finditer(output):
        block = match.group(0)
        if "torch/distributed/run.py" in block or "ChildFailedError" in block:
            continue
        lines = block.splitlines()
        if len(lines) > max_lines:
            lines = lines[:2] + ["    ..."] + lines[-(max_lines - 3):]
        return "\n".join(lines)
    return ""


def evidence(output: str, timed_out: bool = False) -> str:
    """What to show under a failure: the worker's traceback, else the end of the output."""
    text = worker_traceback(output)
    if not text:
        lines = [line for line in output.strip().splitlines() if line.strip()]
        text = "\n".join(lines[-12:])
    prefix = ("the run did not finish within its time limit and was killed, so this check pays nothing (a hang? "
              "workers waiting in different collectives? On a very busy machine, run the check again)\n"
              if timed_out else "")
    if not text:
        return prefix.strip()
    return prefix + "torchrun's output:\n" + "\n".join("    " + line for line in text.splitlines())


def read_half_written(output: str) -> bool:
    return any(sign in output for sign in HALF_WRITTEN_SIGNS)
