"""grader/engine/background.py, what lesson 4's launcher and exercise 4's runner share: a command in a session of
its own, its output in a file, its children found, every wait bounded. Real processes, a few seconds."""

import os
import sys
import time

import psutil
from grader.engine import kill_tree
from grader.engine.background import children, poll_until, start_in_session
from grader.exercises.torchrun.torchrun_process import Torchrun
from grader.lessons import notebook_torchrun

PARENT_OF_TWO = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) for _ in range(2)]\n"
    "print('started', flush=True)\n"
    "print('oops', file=sys.stderr, flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_command_runs_in_its_own_session_with_its_output_in_a_file_and_its_children_found(tmp_path):
    out = tmp_path / "out.txt"
    proc = start_in_session([sys.executable, "-c", PARENT_OF_TWO], str(out), dict(os.environ), cwd=str(tmp_path))
    try:
        assert poll_until(lambda: "oops" in out.read_text() and len(children(proc.pid)) == 2, time.monotonic() + 60)
        assert os.getsid(proc.pid) == proc.pid != os.getsid(0)  # Ctrl-C in the caller's session does not reach it
        assert "started" in out.read_text()  # stdout and stderr, both in the file
        assert all(kid.ppid() == proc.pid for kid in children(proc.pid))
    finally:
        kill_tree(proc.pid)
        proc.wait(timeout=10)
    assert children(proc.pid) == []  # gone: no children, no error


def test_poll_until_is_bounded_and_stops_when_the_command_ended():
    start = time.monotonic()
    assert poll_until(lambda: False, start + 0.3, poll=0.01) is False
    assert 0.3 <= time.monotonic() - start < 5
    answers = iter([False, True])
    assert poll_until(lambda: next(answers), start + 60, ended=lambda: True) is True  # asked once more at the end
    start = time.monotonic()
    assert poll_until(lambda: False, start + 60, ended=lambda: True) is False
    assert time.monotonic() - start < 5


def test_both_launchers_use_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = notebook_torchrun.run(["--help"], timeout=120)
    assert code == 0 and "--nproc" in output, output[-2000:]  # torchrun itself ran and exited
    assert notebook_torchrun.wait_for(lambda: True, 0.1) and not notebook_torchrun.wait_for(lambda: False, 0.1)
    with Torchrun([sys.executable, "-c", PARENT_OF_TWO], cwd=str(tmp_path), timeout=60) as run:
        assert run.wait_until(lambda: len(run.workers()) == 2 and "started" in run.output)
        assert os.getsid(run.proc.pid) == run.proc.pid
        workers = run.workers()
    assert run.proc.poll() is not None  # stopped on leaving, its workers with it
    assert not psutil.wait_procs(workers, timeout=10)[1]
