"""Lesson 4's process plumbing: start torchrun from a notebook in the background, and never wait without a bound.

Two details matter (lesson 4, section 1):
- `start_new_session=True` puts torchrun in a process group of its own, so that Ctrl-C in the notebook does not
  reach it and the notebook decides when it stops.
- torchrun starts every worker in a session of its own too: killing the agent's process group does not reach the
  workers. To stop a whole job, kill the agent's descendants one by one (`kill_tree`, the grader's own).

Every job runs in the current directory (the lesson's temporary folder, from `workspace()`), which is also on the
workers' PYTHONPATH so that the lesson's scripts import each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

from grader.engine import free_port, kill_tree  # noqa: F401  (the lesson imports both from here)
from grader.engine.background import FRESH_STORE_PER_ATTEMPT, TORCHRUN, children, poll_until, start_in_session


def workspace(prefix: str = "lesson4-") -> str:
    """A fresh temporary folder, made the current directory: the scripts and all they write land there."""
    folder = tempfile.mkdtemp(prefix=prefix)
    os.chdir(folder)
    return folder


def torchrun_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.getcwd()  # the scripts import each other from the workspace
    env.update(FRESH_STORE_PER_ATTEMPT)  # a known issue of this setup (torch 2.13): lesson 4's appendix
    env.update(extra)
    return env


class Launch:
    """One torchrun job started in the background; output goes to a file; every wait is bounded."""

    def __init__(self, args: list[str], timeout: float = 60.0, env: dict | None = None, name: str = "run"):
        self.log_path = os.path.join(os.getcwd(), f"{name}-{time.monotonic_ns()}.out")
        self.deadline = time.monotonic() + timeout
        self.started = time.time()
        self.proc = start_in_session(TORCHRUN + args, self.log_path, env or torchrun_env())

    def wait(self):
        """torchrun's exit code, or 'timeout' after killing the whole job."""
        try:
            return self.proc.wait(timeout=max(0.1, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            self.proc.wait()
            return "timeout"

    def workers(self) -> list:
        """The worker processes: the agent's direct children."""
        return children(self.proc.pid)

    @property
    def output(self) -> str:
        with open(self.log_path) as f:
            return f.read()


def run(args: list[str], timeout: float = 60.0, **kwargs):
    """Launch, wait, return (exit code, output)."""
    job = Launch(args, timeout, **kwargs)
    return job.wait(), job.output


def json_lines(text: str) -> list:
    """The JSON objects the lesson's scripts print, one per line, among torchrun's own log lines. Two workers share
    one output pipe, so a line may hold two objects (one worker's text landed before the other's newline)."""
    decoder, objects = json.JSONDecoder(), []
    for line in text.splitlines():
        at = 0
        while line.startswith("{", at):
            obj, at = decoder.raw_decode(line, at)
            objects.append(obj)
    return objects


def wait_for(condition, timeout: float, poll: float = 0.02) -> bool:
    """Poll condition until it holds (True) or timeout seconds pass (False)."""
    return poll_until(condition, time.monotonic() + timeout, poll)
