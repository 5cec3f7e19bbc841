"""A command in the background, in a session of its own, with its output in a file and every wait bounded.

What lesson 4's launcher (grader/lessons/notebook_torchrun.py) and exercise 4's runner (grader/exercises/torchrun/torchrun_process.py)
share. A session of its own: Ctrl-C in a notebook does not reach the command, and kill_tree (processes.py)
reaches its whole tree, torchrun's workers included (torchrun starts each in a session of its own too).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

import psutil

from grader.engine.processes import kill_tree

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # the `torchrun` command, run by this interpreter

# torch 2.13: by default the workers of every attempt share the agent's TCPStore, so after a restart gloo can
# read the previous attempt's addresses ("Gloo connectFullMesh failed ... Connection refused", or a hang; 3
# restarts in 5 here). With this set, each attempt's rank 0 hosts a fresh store (pytorch/pytorch#135712).
FRESH_STORE_PER_ATTEMPT = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


class Interrupted(RuntimeError):
    """This process was told to stop (SIGINT, SIGTERM): no further command starts."""


_LIVE: dict[int, subprocess.Popen] = {}  # the sessions this process started and has not seen end
_STOPPING = threading.Event()


def start_in_session(argv: list[str], output_path: str, env: dict, cwd: str | None = None) -> subprocess.Popen:
    """Start argv in a new session, stdout and stderr into output_path (created afresh), no stdin. Refused
    (Interrupted) once end_every_session ran: a check thread still going must not start another torchrun."""
    if _STOPPING.is_set():
        raise Interrupted("the grading was interrupted")
    with open(output_path, "wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _LIVE[proc.pid] = proc
    return proc


def forget(proc: subprocess.Popen) -> None:
    """proc ended (or was killed and waited for): end_every_session need not reach it."""
    _LIVE.pop(proc.pid, None)


def end_every_session(wait_s: float = 5.0) -> None:
    """Kill the whole tree of every session this process started and that is still alive (the torchrun agent
    and its workers, each in a session of its own), waiting at most wait_s for them; start no more."""
    _STOPPING.set()
    trees = []
    for pid, proc in list(_LIVE.items()):
        if proc.poll() is None:
            trees += [proc.pid] + [p.pid for p in _descendants(pid)]
            kill_tree(pid)
        forget(proc)
    psutil.wait_procs([p for p in map(_process, trees) if p is not None], timeout=wait_s)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


@contextlib.contextmanager
def sessions_end_on_signal():
    """For the body (in the main thread): SIGINT and SIGTERM end every session this process started at once,
    then stop the body, as KeyboardInterrupt and SystemExit(128 + 15), so that its cleanups run too."""

    def stop(signum, frame):
        end_every_session()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
