"""Run real torchrun from the grader's side: bounded, killable, observable.

    with Torchrun(args, cwd=tmp, timeout=60) as run:
        run.wait_until(lambda: logged_epochs(log) >= 2)
        run.kill_worker(local_rank=1)
        run.wait()
    run.output, run.returncode, run.timed_out

Each run starts in its own session so the whole tree (the torchrun agent and
its workers, which torchrun starts in sessions of their own) can be killed;
every wait is bounded. Exit codes are reported, never trusted for a verdict:
a worker that used DDP on CPU can abort at teardown after its work is done.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable

import psutil

import grader
from grader.engine import kill_tree
from grader.engine.background import (
    FRESH_STORE_PER_ATTEMPT,
    TORCHRUN,
    children,
    forget,
    poll_until,
    start_in_session,
)
from grader.exercises.torchrun.probe_worker import VARS as TORCHRUN_VARIABLES  # what torchrun sets in each worker

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(grader.__file__)))
RUN_MODULE = TORCHRUN  # torchrun, from this interpreter
OUTPUT_LIMIT = 12_000

# Signs in torchrun's output that a worker died at teardown (after its work).
TEARDOWN_SIGNS = ("SIGABRT", "Signal 6", "terminate called without an active exception")
# Signs that the agents never met: another program took the rendezvous port between the grader picking it and
# the agent binding it (measured: the agents give up after 60-130 s). The script runs only after a rendezvous.
RENDEZVOUS_SIGNS = ("RendezvousConnectionError", "The connection to the C10d store has failed")


def worker_command(script: str) -> list[str]:
    """What follows torchrun's options in every command the grader builds: `--no-python`, then this
    interpreter running `script`. It runs the same workers as `... script`, but it is not the shape
    `torchrun_command` must return (the script alone after the options), so no grader helper a
    student's code can import is that task's answer."""
    return ["--no-python", sys.executable, "-u", script]


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a grader-launched torchrun: `grader` importable, quiet, small."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"  # torchrun sets it too; set here so it does not print a banner about it
    env["PYTHONUNBUFFERED"] = "1"
    env.update(FRESH_STORE_PER_ATTEMPT)  # a restart's workers get a store of their own (background.py says why)
    env.pop("GRADER_WORKER", None)
    for key in TORCHRUN_VARIABLES:
        env.pop(key, None)  # the grader may itself run inside a rank: do not leak its identity
    env.update(extra or {})
    return env


class Torchrun:
    """One torchrun (or any command) in a fresh session, with a hard deadline."""

    def __init__(self, args: list[str], cwd: str, timeout: float, env: dict[str, str] | None = None):
        self.args, self.cwd, self.timeout = list(args), cwd, timeout
        self.env = env if env is not None else worker_env()
        self.output_path = os.path.join(cwd, f"torchrun-{time.monotonic_ns()}.out")
        self.returncode: int | None = None
        self.timed_out = False
        self.proc: subprocess.Popen | None = None
        self.deadline = 0.0

    def __enter__(self) -> "Torchrun":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.deadline = time.monotonic() + self.timeout
        self.proc = start_in_session(self.args, self.output_path, self.env, cwd=self.cwd)

    def wait_until(self, condition: Callable[[], bool], poll: float = 0.02) -> bool:
        """Poll `condition` until it holds (True), the run ends or the deadline passes (False)."""
        return poll_until(condition, self.deadline, poll, ended=lambda: self.proc.poll() is not None)

    def wait(self) -> int | None:
        """Wait for the end of the run; past the deadline kill its whole tree."""
        try:
            self.returncode = self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.abort_workers()
            self.stop()
        return self.returncode

    def abort_workers(self, wait_s: float = 3.0) -> None:
        """SIGABRT the hung workers, so that each prints where it waits (PYTHONFAULTHANDLER), within wait_s."""
        workers = self.workers()
        for proc in workers:  # one at a time: two stacks written at once into one pipe interleave, unreadable
            try:
                proc.send_signal(signal.SIGABRT)
            except psutil.Error:
                continue
            psutil.wait_procs([proc], timeout=wait_s / max(1, len(workers)))

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)  # the agent and, found through it, its workers
        try:
            self.returncode = self.proc.wait(timeout=5)
            forget(self.proc)
        except subprocess.TimeoutExpired:
            pass

    def workers(self) -> list[psutil.Process]:
        """The worker processes the agent started (its direct children running Python)."""
        return children(self.proc.pid)

    def kill_worker(self, local_rank: int) -> bool:
        """SIGKILL the worker with this LOCAL_RANK; False when there is none."""
        for proc in self.workers():
            try:
                if proc.environ().get("LOCAL_RANK") == str(local_rank):
                    proc.send_signal(signal.SIGKILL)
                    return True
            except psutil.Error:
                continue
        return False

    @property
    def output(self) -> str:
        try:
            with open(self.output_path, "rb") as f:
                data = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        if len(data) > OUTPUT_LIMIT:
            data = data[: OUTPUT_LIMIT // 4] + "\n...\n" + data[-3 * OUTPUT_LIMIT // 4 :]
        return data

    def died_at_teardown(self) -> bool:
        return self._failed_saying(TEARDOWN_SIGNS)

    def lost_rendezvous(self) -> bool:
        return self._failed_saying(RENDEZVOUS_SIGNS)

    def _failed_saying(self, signs: tuple[str, ...]) -> bool:
        """The run failed, and its output holds one of `signs` (the output file read once, only then)."""
        if self.returncode in (0, None):
            return False
        output = self.output
        return any(sign in output for sign in signs)
