"""A grading worker never outlives the grading run that started it (nothing stays behind).

A `make grade` killed with SIGKILL runs no cleanup: its workers are orphaned. A worker waiting for its next
job exits when its job pipe closes, unless something else still holds that pipe (a process the run left
behind, which inherited it): then only the kernel's parent-death signal ends it (processes.die_with_parent).
"""

import os
import signal
import subprocess
import sys
import time

import psutil

from grader.code_digest import grader_digest

# The grading run: start one worker as worker_pool.py does, hand the job pipe's write end to a sleeping process that
# outlives us, report the worker's pid, and wait to be killed.
RUN = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-m", "grader.isolation.grading_worker", "01_parallelism",
                           "--version", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                          pass_fds=[worker.stdin.fileno()], start_new_session=True)
print(worker.pid, holder.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_worker_dies_with_a_killed_grading_run():
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, grader_digest("01_parallelism")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    worker = holder = None
    try:
        worker, holder = map(int, run.stdout.readline().split())
        deadline = time.monotonic() + 180  # the worker is up once it has forked its forkserver (torch imported)
        while not psutil.Process(worker).children() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert psutil.Process(worker).children(), "the worker never started its forkserver"
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + 60
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(worker), "the worker outlived the grading run that started it"
    finally:
        run.kill()
        for pid in (worker, holder):
            if pid is not None:
                try:
                    psutil.Process(pid).kill()
                except psutil.NoSuchProcess:
                    pass
