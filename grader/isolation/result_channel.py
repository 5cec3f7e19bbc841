"""The grading worker's end of its two descriptors to the parent: job lines in, results out.

    channel.take(job_fd=0, result_fd=1)   # first thing in a worker, before it forks or starts anything
    for line in channel.job_lines(): ... channel.send(line)

Student code runs in processes of the worker's own uid (ranks forked from its forkserver, and
multiprocessing's resource tracker, which is started with exec). Whatever one of them can reach, a
submission can use: a process of the same uid may read a dumpable process's memory (/proc/PID/mem, the job's
token) and take its descriptors (pidfd_getfd). So the worker first makes itself non-dumpable (its forks
inherit that; an exec, such as the tracker's, does not), then moves both descriptors to non-inheritable
numbers, with fd 0 on /dev/null and fd 1 on stderr: nothing it starts afterwards holds either of them.
"""

from __future__ import annotations

import fcntl
import os
import sys

from grader.engine.processes import not_dumpable

_channel = None


def take(job_fd: int = 0, result_fd: int = 1) -> None:
    global _channel
    not_dumpable()
    # above stdio, close-on-exec: an exec'd child (the resource tracker) never holds them
    jobs, results = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in (job_fd, result_fd))
    for fd in {job_fd, result_fd} - {0, 1, 2}:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
    _channel = (os.fdopen(jobs, "r", encoding="utf-8"), os.fdopen(results, "w", buffering=1, encoding="utf-8"))


def job_lines():
    """The job lines the parent sends (take() must have run)."""
    return _taken()[0]


def send(line: str) -> None:
    out = _taken()[1]
    out.write(line + "\n")
    out.flush()


def _taken():
    if _channel is None:
        raise RuntimeError("channel.take() runs first, before the worker forks anything")
    return _channel
