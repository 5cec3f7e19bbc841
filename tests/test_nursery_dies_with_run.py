"""A nursery's job can be killed alone, a killed grading run leaves no nursery and no job behind, and a dead
nursery loses only its jobs and is replaced.

The grading run here starts one public-phase nursery as batch.py does (nurseries.Nursery), starts two jobs
from it and feeds neither (each worker waits for its job line, its forkserver started), hands both job
pipes' write ends to a sleeping process that outlives the run, and reports the pids. The test kills the
first job as worker_pool.py kills a hung one (kill_tree of the pid the job reported): every process of that job
ends, the other job lives on. Then it SIGKILLs the run: no cleanup runs, and still the nursery, its
sandbox and every job's process end (bwrap --die-with-parent, then each process's parent-death signal).
"""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from grader.code_digest import grader_digest
from grader.engine import kill_tree
from tests.helpers import ROOT, needs_bwrap

A = "01_parallelism"
RUN = """
import subprocess, sys, time
from grader.isolation.nursery_client import Nursery
nursery = Nursery([sys.argv[1], "--version", sys.argv[2]], True, 1)
jobs = [nursery.start(None) for _ in range(2)]
holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                          pass_fds=[job.stdin.fileno() for job in jobs], start_new_session=True)
print(nursery.proc.pid, jobs[0].pid, jobs[1].pid, holder.pid, flush=True)
time.sleep(600)
"""

pytestmark = [
    needs_bwrap,
    pytest.mark.timeout(600),
]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _tree(pid: int) -> list[int]:
    try:
        return [pid] + [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _wait_gone(pids, bound_s: float) -> list[int]:
    deadline = time.monotonic() + bound_s  # SIGKILL is in flight; a liveness bound, not a verdict
    while [p for p in pids if not _gone(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if not _gone(p)]


def _forkserver_up(job: int) -> bool:
    return len(_tree(job)) >= 5  # first process > reaper > worker > resource tracker and forkserver


def test_one_job_dies_alone_and_a_killed_run_leaves_nothing():
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, A, grader_digest(A)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    pids = []
    try:
        nursery, first, second, holder = map(int, run.stdout.readline().split())
        pids = [nursery, first, second, holder]
        deadline = time.monotonic() + 300  # each job is up once its worker has forked its forkserver
        while not (_forkserver_up(first) and _forkserver_up(second)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _forkserver_up(first) and _forkserver_up(second), (_tree(first), _tree(second))
        first_tree, second_tree = _tree(first), _tree(second)
        assert not set(first_tree) & set(second_tree)
        kill_tree(first)
        assert _wait_gone(first_tree, 60) == [], "a killed job left processes behind"
        assert not [p for p in second_tree if _gone(p)], "killing one job killed another"
        everything = _tree(nursery) + second_tree
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        assert _wait_gone(everything, 60) == [], "a nursery or a job outlived the grading run that started it"
    finally:
        run.kill()
        for pid in pids:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def test_a_dead_nursery_loses_its_job_and_is_replaced():
    """The public nursery dies while its job waits for its line: that job reads as ended (worker_pool.py reports the
    submission lost, as for a dead worker), and the next job gets a new nursery and its result."""
    from grader.isolation.nursery_client import Nurseries

    nurseries = Nurseries([A, "--version", grader_digest(A)], 1)
    try:
        orphan = nurseries.start(None, True)
        dead = nurseries.by_kind[True].proc.pid
        kill_tree(dead)
        try:
            ended = orphan.stdout.readline()
        except ConnectionResetError:  # killed before it read the go byte: a reset (pool.Lines reads it as the end)
            ended = ""
        assert ended == ""
        orphan.wait(timeout=60)
        job = nurseries.start(None, True)
        assert nurseries.by_kind[True].proc.pid != dead
        job.stdin.write("\t".join(["nobody", "", "nothing.ipynb", "token", "public", "{}"]) + "\n")
        job.stdin.close()
        token, result = job.stdout.readline().split("\t", 1)
        assert token == "token" and '"readable": false' in result, result
        job.wait(timeout=60)
    finally:
        nurseries.close()


DEAD_AT_START = """
from grader.isolation.nursery_client import Nurseries, Nursery
lone = Nursery(["no_such_assignment", "--version", "x"], True, 1)  # exits at start: the assignment is unknown
print(lone.start(None))
nurseries = Nurseries(["no_such_assignment", "--version", "x"], 1)
job = nurseries.start(None, True)
print(job.pid, repr(job.stdout.readline()))
nurseries.close()
from grader.engine import kill_tree
for pid in (0, -1):
    try:
        kill_tree(pid)  # 0: this process's own group; -1: every process it may signal
    except ValueError:
        print("refused", pid)
"""


def test_a_nursery_dead_before_its_hello_loses_the_job_and_nothing_else():
    """The job's socket reads as EOF at once; at EOF SO_PASSCRED still hands credentials, with pid 0, and a job
    taken for pid 0 would have had kill_tree(0) kill the grading run's own process group; kill_tree refuses such
    pids. Run in a session of its own, so that a kill of "our group" cannot reach the tests."""
    proc = subprocess.run(
        [sys.executable, "-c", DEAD_AT_START],
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.splitlines() == ["None", "None ''", "refused 0", "refused -1"], proc.stdout
