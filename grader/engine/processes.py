"""Process plumbing: the forkserver the ranks are forked from, ports, killing, output files."""
from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import threading
from multiprocessing import popen_forkserver, spawn

import psutil

OUTPUT_LIMIT = 32_000  # characters of a rank's output kept (head and tail)

_context = None


class _NoMainPopen(popen_forkserver.Popen):
    """Start a rank without re-running the parent's __main__ in it.

    multiprocessing normally re-imports __main__ in every child (a script, or
    nothing useful in a notebook); our ranks receive everything they need by
    value, so that step is only slow and surprising.
    """

    _lock = threading.Lock()  # runs may start from several threads (a notebook's checks run side by side)

    def _launch(self, process_obj):
        with self._lock:
            original = spawn.get_preparation_data

            def without_main(name):
                data = original(name)
                data.pop("init_main_from_path", None)
                data.pop("init_main_from_name", None)
                return data

            spawn.get_preparation_data = without_main
            try:
                super()._launch(process_obj)
            finally:
                spawn.get_preparation_data = original


def forkserver_context():
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["grader.engine.preload"])
        _context = ctx
    return _context


class RankProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _NoMainPopen(process_obj)


def warm_up() -> None:
    """Start the forkserver now (about 3 s once per grader process)."""
    from multiprocessing import forkserver

    forkserver_context()
    forkserver.ensure_running()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_output(path: str) -> str:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            if size <= OUTPUT_LIMIT:
                data = f.read().decode("utf-8", "replace")
            else:
                half = OUTPUT_LIMIT // 2
                head = f.read(half).decode("utf-8", "replace")
                f.seek(size - half)
                tail = f.read().decode("utf-8", "replace")
                data = f"{head}\n... [{size - OUTPUT_LIMIT} bytes of output left out] ...\n{tail}"
    except OSError:
        return ""
    return data


def kill_tree(pid: int) -> None:
    """SIGKILL a rank, its process group and every descendant."""
    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        procs = []
    for sig_target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            sig_target()
        except (ProcessLookupError, PermissionError, OSError):
            pass
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
