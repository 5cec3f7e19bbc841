"""The grading worker's entry: `python -m grader.isolation.grading_worker ASSIGNMENT --version V [...]`.

worker_pool.py starts one per worker (one per sandboxed job). It is not `python -m grader _grade-worker`:
the CLI's command registry imports modules grading never needs (nbformat's schema validator alone
costs about 2 CPU-seconds per start, paid twice per sandboxed submission). Before it loads the
exercise's hidden checks or reads a job, it imports torch and the public checks once and forks the
ranks' forkserver from itself (engine/forked_forkserver.py): one torch import per worker, not two. Before
all that it takes its stdin and stdout private (result_channel.py): nothing it starts holds the result channel.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.isolation.grading_worker")
    parser.add_argument("assignment")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--version", required=True, help="the grader digest the parent run started with")
    args = parser.parse_args(argv)

    from grader.engine import forked_forkserver, processes
    from grader.isolation import result_channel as channel

    channel.take(0, 1)  # non-dumpable, job lines and results on private descriptors: before anything starts
    processes.die_with_parent()  # a killed grading run leaves no worker behind, even if its job pipe stays open
    if processes.in_sandbox():  # its own uid (as root) or user namespace: a budget of processes its own
        from grader.isolation.job_limits import bound_own_processes

        bound_own_processes()
    from grader.exercises import find

    processes.preload(find(args.assignment).public)  # never a hidden module: the forkserver is forked now
    # a long-lived worker (--no-sandbox) forks ranks for many submissions; a sandbox's worker grades one
    forked_forkserver.start_here(huge_pages=not processes.in_sandbox())
    from grader.gradebook.grade_job import worker_main

    return worker_main(args.assignment, args.timeout, args.world_size, args.version)


if __name__ == "__main__":
    sys.exit(main())
