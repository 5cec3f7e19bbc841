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


# torchrun prefixes each line a worker writes with its rank when the worker fails ("[rank1]: Traceback ...")
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:[ ]?", re.MULTILINE)
# A worker's error caused by another worker's crash (gloo's closed connection): not the cause to show first
CONSEQUENCE_SIGNS = ("Connection closed by peer", "remote worker crashing", "Connection reset by peer")


def _streams(output: str) -> list[str]:
    """The output, and each rank's own lines (torchrun's "[rankN]: " prefixes removed), in the order each rank's
    first line came: a worker's traceback whose lines were prefixed reads as a plain traceback there."""
    ranks: dict[str, list[str]] = {}
    for line in output.splitlines():
        prefix = _RANK_PREFIX.match(line)
        if prefix:
            ranks.setdefault(prefix[1], []).append(line[prefix.end() :])
    return ["\n".join(lines) + "\n" for lines in ranks.values()] + [output]


def worker_traceback(output: str, max_lines: int = 18) -> str:
    """The first traceback of a worker (not torchrun's own ChildFailedError report), preferring one that is not
    the echo of another worker's crash (gloo's "Connection closed by peer")."""
    found = [block for stream in _streams(output) for block in _worker_tracebacks(stream, max_lines)]
    causes = [block for block in found if not any(sign in block for sign in CONSEQUENCE_SIGNS)]
    return (causes or found or [""])[0]


def _worker_tracebacks(output: str, max_lines: int):
    for match in _TRACEBACK.finditer(output):
        block = match.group(0)
        if "torch/distributed/run.py" in block or "ChildFailedError" in block:
            continue
        head, *rest = block.splitlines()
        lines = [head] + [line for line in rest if line != TRACEBACK_HEAD]  # another worker's head, interleaved
        if len(lines) > max_lines:
            lines = lines[:2] + ["    ..."] + lines[-(max_lines - 3) :]
        yield "\n".join(lines)


_JOB_FOLDER = re.compile(r'File "/[^"]*?/(?:run/(?:node\d/)?|python-site/)')
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
    text = _JOB_FOLDER.sub('File "', text)  # the grader's temporary folders say nothing to the student
    return prefix + "torchrun's output:\n" + "\n".join("    " + line for line in text.splitlines())


def read_half_written(output: str) -> bool:
    return any(sign in output for sign in HALF_WRITTEN_SIGNS)
