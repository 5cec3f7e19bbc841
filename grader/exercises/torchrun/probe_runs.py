"""The grader's probe runs (04_torchrun): torchrun jobs of the grader's own worker script.

    with ProbeDir(submission) as probe:
        output, timed_out = run_probe([command + ...], probe)
        probe.records()   # (rank, attempt) -> what that worker saw (and read_dist_env's answer)

The probe (probe_worker.py) imports no torch, so a probe run costs only torchrun's own
start-up: a few seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from typing import Callable

import cloudpickle

from grader.engine import reserved_port
from grader.exercises.torchrun.torchrun_process import Torchrun, worker_env

PROBE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_worker.py")
PROBE_TIMEOUT_S = 45.0


class ProbeDir:
    """A fresh directory holding the grader's probe script, its output folder and,
    when given, the pickled submission the probe loads read_dist_env from."""

    def __init__(self, submission=None):
        self.root = tempfile.mkdtemp(prefix="torchrun-probe-")
        self.script = os.path.join(self.root, "probe_worker.py")
        self.out = os.path.join(self.root, "out")
        os.mkdir(self.out)
        shutil.copy(PROBE_SOURCE, self.script)
        self.extra: list[str] = []
        if submission is not None:
            path = os.path.join(self.root, "submission.pkl")
            with open(path, "wb") as f:
                cloudpickle.dump(submission, f)
            self.extra = [path]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)

    def records(self) -> dict[tuple[int, int], dict]:
        """(rank, attempt) -> what that worker wrote."""
        found = {}
        for name in os.listdir(self.out):
            if name.endswith(".json"):
                rank, attempt = name[len("rank") : -len(".json")].split("-attempt")
                with open(os.path.join(self.out, name)) as f:
                    found[(int(rank), int(attempt))] = json.load(f)
        return found


def run_probe(commands: list[list[str]], probe: ProbeDir, env_extra: dict | None = None) -> tuple[str, bool]:
    """Run one torchrun agent per command at once (each ending with the probe script);
    returns their joined output and whether any was killed at the deadline."""
    output, timed_out, _ = _run_agents(commands, probe, env_extra)
    return output, timed_out


def run_two_node_probe(commands_for: Callable[[str], list[list[str]]], probe: ProbeDir) -> tuple[str, bool]:
    """run_probe on the agents `commands_for(endpoint)` builds for a fresh 127.0.0.1 port; once more, on another
    port, when they could not meet because another program took the port meanwhile (no worker ran)."""
    for _ in range(2):
        with reserved_port() as port:
            output, timed_out, lost = _run_agents(commands_for(f"127.0.0.1:{port}"), probe)
        if not lost or probe.records():
            break
    return output, timed_out


def _run_agents(commands: list[list[str]], probe: ProbeDir, env_extra: dict | None = None) -> tuple[str, bool, bool]:
    """(joined output, any killed at the deadline, any lost its rendezvous)."""
    env = worker_env(env_extra)
    procs = [Torchrun(cmd + [probe.out] + probe.extra, probe.root, PROBE_TIMEOUT_S, env) for cmd in commands]
    output, timed_out = "", False
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.wait()
            output += proc.output
            timed_out = timed_out or proc.timed_out
    finally:
        for proc in procs:
            proc.stop()
    return output, timed_out, any(proc.lost_rendezvous() for proc in procs)
