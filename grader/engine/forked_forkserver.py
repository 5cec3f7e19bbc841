"""The ranks' forkserver started as a fork of this process, not as a fresh interpreter.

    start_here()   # in a grading worker, before it loads any hidden check or reads any job

multiprocessing's forkserver is a new Python that imports the preload modules (torch,
torch._dynamo, the public checks: about 4 CPU-seconds). A grading worker needs torch
itself, so it would pay that import twice, and a sandboxed submission pays a fresh
worker per phase. Here the worker imports the preload modules once and forks: the child
is the forkserver, with everything already imported (the same state a fresh forkserver
reaches: modules imported, no thread started, no torch op run). The launcher finds it
through multiprocessing's own bookkeeping and forks ranks from it as usual.

Call it before this process holds anything a rank must not inherit: a hidden check module,
a job, the result channel. The child keeps only the listener, the alive pipe and stdio
(stdin /dev/null, stdout onto stderr); every other descriptor is closed.
"""

from __future__ import annotations

import gc
import importlib
import os
import socket
from multiprocessing import connection, forkserver, resource_tracker

from grader.engine import huge_pages as huge_pages_
from grader.engine import processes


def start_here(huge_pages: bool = False) -> bool:
    """Fork the forkserver from this process; False (nothing done) if one runs already or this
    Python's multiprocessing lacks what it relies on (then the first run starts one as usual).
    huge_pages: collapse this process's memory into huge pages first (huge_pages.py), for a process
    whose forkserver forks ranks for many submissions."""
    server = getattr(forkserver, "_forkserver", None)
    if server is None or not hasattr(server, "_forkserver_pid") or server._forkserver_pid is not None:
        return False
    for module in processes.PRELOAD:
        importlib.import_module(module)  # here, once: the child inherits them
    processes.forkserver_context()
    resource_tracker.ensure_running()  # before the fork, as ensure_running() would: ranks get its fd per launch
    # Every object so far out of the cyclic GC's reach: a rank's full collection would otherwise walk (and
    # copy-on-write) the ~300,000 objects of torch's import, about 1.4 s here; what a rank creates is collected as usual.
    gc.collect()
    gc.freeze()
    if huge_pages:
        huge_pages_.collapse()
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the forkserver
            try:
                _keep_only(listener.fileno(), alive_r)
                forkserver.main(listener.fileno(), alive_r, [])
            finally:
                os._exit(0)
        os.close(alive_r)
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w  # closed when this process ends: the forkserver then exits
    server._forkserver_pid = pid
    return True


def _keep_only(*fds: int) -> None:
    """Close every descriptor but stdio and `fds`; stdout goes to stderr (the worker's stdout is
    its result pipe to the grader: no rank may hold it)."""
    os.dup2(2, 1)
    keep = sorted({0, 1, 2, *fds})
    for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
        os.closerange(low + 1, high)
