"""Long-lived grading workers (`python -m grader _grade-worker`) and the parent's side of them.

Each job line the parent sends carries a fresh random token; the worker sends
its result back as one JSON line with that token, on a private copy of its
stdout (fd 1 itself points at stderr before any student code runs, so ranks
forked from the worker's forkserver do not inherit the channel). A line with a
wrong token, another student or a second result is ignored and reported.
"""
from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import sys
import time
from typing import Callable

from tqdm import tqdm

from grader.engine import kill_tree

SUBMISSION_BOUND_S = 900  # a whole submission, every check bounded already; this only guards the worker


def private_channel():
    """The worker's result channel: fd 1 moved to a non-inheritable descriptor; fd 1 becomes stderr."""
    channel = os.dup(1)  # os.dup: not inherited by processes started later
    os.dup2(2, 1)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    return os.fdopen(channel, "w", buffering=1, encoding="utf-8")


def run_pool(items: list[tuple[str, str | None, str]], worker_args: list[str], jobs: int,
             on_result: Callable[[str, dict], None], on_stray: Callable[[str, str], None],
             on_tick: Callable[[set[str]], None], progress: bool, total: int, desc: str) -> None:
    """Grade items (student, private copy, name shown) in `jobs` workers. on_result(student, result) for
    each genuine result; on_stray(student, why) for a message that is not; on_tick(students whose
    code may have run since the last tick) at least once a second."""
    if not items:
        return
    bar = tqdm(total=total, initial=total - len(items), desc=desc, unit="submission", disable=not progress,
               file=sys.stderr)
    queue = list(items)
    selector = selectors.DefaultSelector()
    workers: dict[subprocess.Popen, dict | None] = {}
    window: set[str] = set()  # students whose code may have run since the last tick

    def start_worker():
        proc = subprocess.Popen([sys.executable, "-m", "grader", "_grade-worker", *worker_args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                encoding="utf-8", start_new_session=True)
        selector.register(proc.stdout, selectors.EVENT_READ, proc)
        workers[proc] = None
        feed(proc)

    def feed(proc):
        if queue:
            student, path, shown_as = queue.pop(0)
            workers[proc] = {"student": student, "token": secrets.token_hex(16), "since": time.monotonic()}
            window.add(student)
            proc.stdin.write(f"{student}\t{path or ''}\t{shown_as}\t{workers[proc]['token']}\n")
            proc.stdin.flush()
        else:
            workers[proc] = None
            proc.stdin.close()

    def stop(proc):
        selector.unregister(proc.stdout)
        del workers[proc]
        kill_tree(proc.pid)  # the worker, its forkserver and any rank still running
        proc.wait(timeout=10)

    def message(proc, line: str) -> None:
        job = workers[proc]
        try:
            token, result = line.split("\t", 1)
            result = json.loads(result)
        except ValueError:
            token, result = None, None
        if job is None or token != job["token"] or not isinstance(result, dict) \
                or result.get("student") != job["student"]:
            if job is not None:
                on_stray(job["student"], "a message that was not the grader's reached the grader's pipe "
                                         "while this submission was graded (ignored)")
            return
        on_result(job["student"], result)
        bar.update(1)
        feed(proc)

    for _ in range(min(jobs, len(queue))):
        start_worker()
    try:
        while workers:
            for key, _ in selector.select(timeout=1.0):
                proc = key.data
                line = proc.stdout.readline()
                if line:
                    message(proc, line.rstrip("\n"))
                else:  # the worker ended: finished, or died on a submission
                    if workers[proc] is not None:
                        bar.update(1)  # its current submission stays ungraded and is reported so
                    stop(proc)
                    if queue:
                        start_worker()
            for proc, job in list(workers.items()):
                if job and time.monotonic() - job["since"] > SUBMISSION_BOUND_S:
                    stop(proc)
                    bar.update(1)
                    if queue:
                        start_worker()
            on_tick(set(window))
            window.clear()
            window.update(job["student"] for job in workers.values() if job)
    finally:
        for proc in list(workers):
            stop(proc)
        bar.close()
