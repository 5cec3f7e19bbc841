"""An interrupted `python -m grader check` (SIGINT, SIGTERM) ends every torchrun job it started (exercise 4's
train_script runs each in a session of its own, out of reach of the terminal's signal): nothing of the job is
left running once the command has exited."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import ROOT, solution_notebook


def _under(folder: str) -> list[psutil.Process]:
    """The live processes working in `folder` (the grader's torchrun jobs run in folders of TMPDIR)."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.cwd().startswith(folder):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _torchrun_started(folder: str) -> bool:
    for proc in _under(folder):
        try:
            if "torch.distributed.run" in " ".join(proc.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.timeout(420)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_check_leaves_no_torchrun_job(tmp_path, signum):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the jobs' folders, and so their processes' working directories
    command = [sys.executable, "-m", "grader", "check", "04_torchrun", solution_notebook("04_torchrun")]
    cli = subprocess.Popen(
        command + ["--task", "train_script"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the signal goes to the command alone, as a timeout's kill would send it
    )
    try:
        deadline = time.monotonic() + 300  # a bound only: the signal is sent once a torchrun job runs
        while not _torchrun_started(str(tmp_path)) and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cli.poll() is None and _torchrun_started(str(tmp_path)), "no torchrun job was started"
        cli.send_signal(signum)
        cli.wait(timeout=60)  # bounded: it must not wait for its jobs to finish
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    left = psutil.wait_procs(_under(str(tmp_path)), timeout=5)[1]  # a zombie's last second is not a leftover
    assert not left, [" ".join(p.cmdline()) for p in left if p.is_running()]
    assert cli.returncode != 0
