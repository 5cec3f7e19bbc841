"""A command in the background, in a session of its own, with its output in a file and every wait bounded.

What lesson 4's launcher (grader/lessons/launch.py) and exercise 4's runner (grader/exercises/torchrun/launch.py)
share. A session of its own: Ctrl-C in a notebook does not reach the command, and kill_tree (processes.py)
reaches its whole tree, torchrun's workers included (torchrun starts each in a session of its own too).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable

import psutil

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # the `torchrun` command, run by this interpreter

# torch 2.13: by default the workers of every attempt share the agent's TCPStore, so after a restart gloo can
# read the previous attempt's addresses ("Gloo connectFullMesh failed ... Connection refused", or a hang; 3
# restarts in 5 here). With this set, each attempt's rank 0 hosts a fresh store (pytorch/pytorch#135712).
FRESH_STORE_PER_ATTEMPT = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def start_in_session(argv: list[str], output_path: str, env: dict, cwd: str | None = None) -> subprocess.Popen:
    """Start argv in a new session, stdout and stderr into output_path (created afresh), no stdin."""
    with open(output_path, "wb") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def children(pid: int) -> list[psutil.Process]:
    """The direct children of pid (a torchrun agent's: its workers); none once it is gone."""
    try:
        return psutil.Process(pid).children(recursive=False)
    except psutil.Error:
        return []


def poll_until(
    condition: Callable[[], bool], deadline: float, poll: float = 0.02, ended: Callable[[], bool] = lambda: False
) -> bool:
    """Poll condition until it holds (True) or time.monotonic() reaches deadline (False). Once ended() (the command
    exited), the answer is condition() one last time."""
    while time.monotonic() < deadline:
        if condition():
            return True
        if ended():
            return condition()
        time.sleep(poll)
    return False
