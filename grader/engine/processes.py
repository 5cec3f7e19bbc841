"""Process plumbing: the forkserver the ranks are forked from, ports (and their locks), killing, output files."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from multiprocessing import popen_forkserver, spawn

import psutil

from grader.engine.private_folders import UnsafeFolder, private_folder, runtime_base

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


# What the forkserver imports once; preload() adds the checks.
PRELOAD = ["grader.engine.preload"]


def preload(modules) -> None:
    """Have the forkserver import these modules too, once, so every rank starts with them.
    The engine knows no exercise: whoever loads one passes its public check modules (grader.exercises).
    Named after the forkserver started, a module is only imported by the rank that needs it (slower)."""
    added = [m for m in modules if m not in PRELOAD]
    PRELOAD.extend(added)
    if added and _context is not None:
        _context.set_forkserver_preload(list(PRELOAD))


def forkserver_context():
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
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


SANDBOXED = "GRADER_SANDBOXED"  # set to 1 by the grading sandbox: its own loopback, no other grader to avoid
PORT_HOLD_S = 600.0  # a port from free_port() stays ours this long (a run or a torchrun job is bounded below)
_held: dict[int, tuple[float, int, str]] = {}  # port -> (until, lock fd, lock file)
_held_lock = threading.Lock()
_refused: list[str] = []  # why the lock folder was refused (warned once)


def lock_folder() -> str:
    """The port locks' folder, private to the grading user (0700; refused if a link or someone else's)."""
    base = runtime_base()
    name = "ddp-grader-ports" if base == os.environ.get("XDG_RUNTIME_DIR") else f"ddp-grader-ports-{os.geteuid()}"
    return private_folder(os.path.join(base, name))


def in_sandbox() -> bool:
    """Whether this process runs inside a grading sandbox (sandbox.py sets the marker)."""
    return os.environ.get(SANDBOXED) == "1"


def free_port() -> int:
    """A free TCP port that no other run of this grader of this user is handed meanwhile.

    Two graders (make grade's workers, two kernels) may each ask the kernel for a free port
    and get the same one; a run whose store another run's rank joined then fails through no
    fault of the student. A lock file per port (flock, released when its holder exits or
    after PORT_HOLD_S) keeps the grader's own runs apart. The locks live in a folder only the
    grading user can read, so nobody else learns which ports the grader is about to use. In the
    sandbox (GRADER_SANDBOXED=1) each submission has its own loopback: no locks are needed."""
    if in_sandbox():
        return _ephemeral_port()
    with _held_lock:
        now = time.monotonic()
        for port in [p for p, (until, _, _) in _held.items() if until < now]:
            _unlock(*_held.pop(port)[1:])
        try:
            folder = lock_folder()
        except UnsafeFolder as exc:
            if not _refused:
                _refused.append(str(exc))
                print(f"grader: no port locks ({exc})", file=sys.stderr)
            return _ephemeral_port()  # still a free port; only other graders' runs are not kept apart
        for _ in range(64):
            port = _ephemeral_port()
            held = _lock_port(port, folder) if port not in _held else None
            if held is not None:
                _held[port] = (now + PORT_HOLD_S, *held)
                return port
        return _ephemeral_port()


def release_port(port: int) -> None:
    """Done with a port from free_port(): other runs may be handed it again (its lock file is removed)."""
    with _held_lock:
        if port in _held:
            _unlock(*_held.pop(port)[1:])


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


def _lock_port(port: int, folder: str) -> tuple[int, str] | None:
    """(fd, path) of this port's lock, now held; None if another grader holds it."""
    path = os.path.join(folder, str(port))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # its last holder removes the file before it lets go: a lock on a file no longer at `path` is no lock
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            return fd, path
    except OSError:
        pass
    os.close(fd)
    return None


def _unlock(fd: int, path: str) -> None:
    try:
        os.unlink(path)  # while still holding it: see _lock_port
    except OSError:
        pass
    os.close(fd)


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
    """SIGKILL a rank, its process group and every descendant. A pid under 1 is refused: kill(0) and kill(-1)
    would reach this process's own group, or every process it may signal."""
    if not isinstance(pid, int) or pid < 1:
        raise ValueError(f"kill_tree: no process has pid {pid!r}")
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


_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def not_dumpable() -> None:
    """Make this process non-dumpable (PR_SET_DUMPABLE 0): a process of its uid without CAP_SYS_PTRACE can then
    neither read its memory (/proc/PID/mem) nor take its descriptors (pidfd_getfd), nor ptrace it. Its forks
    inherit that; a process it execs does not. Raises OSError if refused: a worker must not run student code
    without it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(err)}")


def die_with_parent(required: bool = False) -> bool:
    """Ask Linux to SIGKILL this process when its parent ends (PR_SET_PDEATHSIG): a grading worker must not
    outlive a grading run that was killed (its finally blocks never ran) while something else still holds its
    job pipe. Call it again after any uid change (those clear it). False when the call is refused (not Linux),
    or OSError with `required` (a sandboxed job must not run half isolated); exits at once if the parent
    ended meanwhile."""
    import ctypes

    parent = os.getppid()
    try:
        done = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        done = False
    if not done and required:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) refused")
    if os.getppid() != parent:  # the parent ended before the call: nobody would send the signal
        os.kill(os.getpid(), signal.SIGKILL)
    return done


@contextmanager
def adopting_orphans():
    """For the length of a with-block, this process adopts every orphan of its descendants (Linux's child
    subreaper) and kills those still alive when the block ends: a double fork with setsid escapes kill_tree,
    not this. Children this process had before the block are left alone."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    adopted = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    try:
        yield
    finally:
        if adopted:
            strays = [p for p in me.children() if p.pid not in before]
            for p in strays:
                kill_tree(p.pid)
            psutil.wait_procs(strays, timeout=10)
            _reap_adopted(before)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _reap_adopted(keep: set[int]) -> None:
    """Collect the exit status of adopted orphans that ended (no zombie stays behind us)."""
    for p in psutil.Process().children():
        if p.pid not in keep:
            try:
                os.waitpid(p.pid, os.WNOHANG)
            except ChildProcessError:
                pass
