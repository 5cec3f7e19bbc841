"""A sandbox's nursery: one long-lived process per phase that pays the cold start once and forks each job.

    python -m grader.isolation.nursery ASSIGNMENT --timeout T --world-size N --version V

It runs inside a bubblewrap sandbox built like a grading worker's (sandbox.Sandbox(..., nursery=True)) but with
no submission bound in. It imports torch and the exercise's public checks once (never a hidden check), freezes
them out of the GC's reach, and then only reads job messages on fd 0 (a SOCK_SEQPACKET socket from the parent,
nursery_client.py): each carries the job's result socket, the read end of its job-line pipe and a read-only
descriptor of the parent's private copy of the submission. The nursery never reads a student byte and never
runs student code; it forks, and the child (nursery_job.py) isolates itself before it reads the submission.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import sys
import traceback

MAX_FDS = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.isolation.nursery")
    parser.add_argument("assignment")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--version", required=True)
    args = parser.parse_args(argv)

    from grader.engine import huge_pages, processes

    processes.die_with_parent()  # the grading run's end (or its kill) ends the nursery, and with it every job
    from grader.exercises import find

    processes.preload(find(args.assignment).public)  # never a hidden module: every job inherits what is here
    for module in processes.PRELOAD:
        __import__(module)
    from grader.isolation import nursery_job as jobs  # what a child runs; imported now, never after a fork
    from grader.gradebook.grade_job import worker_main  # noqa: F401  (imported here once, for every job)

    gc.collect()
    gc.freeze()
    huge_pages.collapse()  # every job's forks (its own, its forkserver's ranks) copy far fewer page tables
    control = socket.socket(fileno=0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # a finished job's first process is reaped by the kernel
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 4096, MAX_FDS)
        except OSError:
            return 1
        if not message:
            return 0  # the parent closed its end: no more jobs
        try:
            header = json.loads(message)
        except ValueError:
            header = None
        if not isinstance(header, dict) or len(fds) != header.get("fds"):
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = jobs.run(args, header, fds)
            except BaseException:
                traceback.print_exc()  # onto the sandbox's stderr (GRADER_SANDBOX_STDERR=1 shows it)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
