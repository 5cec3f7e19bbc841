"""Process plumbing: the forkserver the ranks are forked from, ports, killing, output files."""
from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
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


PORT_LOCKS = os.path.join(tempfile.gettempdir(), "ddp-grader-ports")
PORT_HOLD_S = 600.0  # a port from free_port() stays ours this long (a run or a torchrun job is bounded below)
_held: dict[int, tuple[float, int]] = {}  # port -> (until, lock fd)
_held_lock = threading.Lock()


def free_port() -> int:
    """A free TCP port that no other run of this grader on this machine is handed meanwhile.

    Two graders (make grade's workers, two kernels) may each ask the kernel for a free port
    and get the same one; a run whose store another run's rank joined then fails through no
    fault of the student. A lock file per port (flock, released when its holder exits or
    after PORT_HOLD_S) keeps the grader's own runs apart."""
    with _held_lock:
        now = time.monotonic()
        for port in [p for p, (until, _) in _held.items() if until < now]:
            os.close(_held.pop(port)[1])
        for _ in range(64):
            port = _ephemeral_port()
            fd = _lock_port(port) if port not in _held else None
            if fd is not None:
                _held[port] = (now + PORT_HOLD_S, fd)
                return port
        return _ephemeral_port()  # no lock folder: still a free port


def release_port(port: int) -> None:
    """Done with a port from free_port(): other runs may be handed it again."""
    with _held_lock:
        if port in _held:
            os.close(_held.pop(port)[1])


@contextmanager
def reserved_port():
    """free_port() for the length of a with-block: `with reserved_port() as port: ...`."""
    port = free_port()
    try:
        yield port
    finally:
        release_port(port)


def _ephemeral_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lock_port(port: int) -> int | None:
    try:
        os.makedirs(PORT_LOCKS, exist_ok=True)
        try:
            os.chmod(PORT_LOCKS, 0o1777)  # shared by every user's grader (a hub), like /tmp
        except OSError:
            pass
        fd = os.open(os.path.join(PORT_LOCKS, str(port)), os.O_RDONLY | os.O_CREAT, 0o444)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        os.close(fd)
        return None


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
