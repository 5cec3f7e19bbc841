"""The parent's side of the nurseries (nursery.py): one per phase kind, each job a process worker_pool.py can drive.

    nurseries = Nurseries(worker_args, jobs)
    proc = nurseries.start(job)    # what Workers.start returns: .stdin, .stdout, .pid, .wait()
    nurseries.close()

A job is sent as one SOCK_SEQPACKET message with three descriptors: its result socket (the worker's
fd 1, read here as worker_pool.py reads a worker's stdout), the read end of its job-line pipe (worker_pool.py writes
the job line into .stdin as before), and the parent's private copy of the submission, opened read-only.
The job's first process answers with one byte carrying SCM_CREDENTIALS; the kernel translates its pid
into ours, so kill_tree(proc.pid) reaches it and every descendant (its reaper's death ends the job's PID
namespace). It is moved into the job's cgroups (job_limits.py), where there are some, and only then sent
the go byte it waits for. A nursery that is dead or does not answer is killed, and the next job starts a new one; a job
that could not be started reads as ended at once, so worker_pool.py reports it lost, as for a dead worker.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import sys

from grader.engine import kill_tree
from grader.isolation import host_proc
from grader.isolation.sandbox import Sandbox

NURSERY_ENV = "GRADER_NURSERY"  # "0": one bubblewrap sandbox per job; anything else: nurseries (the default)
HELLO_S = 120.0  # a liveness bound on a fork under load, never a verdict
_UCRED = struct.calcsize("3i")


def use_nursery() -> bool:
    """Nurseries unless GRADER_NURSERY=0, as root and as any other user: as root bwrap builds the sandbox and the
    nursery and its jobs run as nobody; as another user the nursery's sandbox is a user namespace and each job
    nests one more in it (tests/test_result_channel.py grades a class so, as a fresh non-root account). Not where
    the host's /proc has submounts no fresh /proc can avoid (host_proc.py; nursery_notice says so)."""
    return os.environ.get(NURSERY_ENV) != "0" and host_proc.nursery_unusable() is None


def nursery_notice() -> str | None:
    """The one line said at start when /proc has submounts (a GPU container): nurseries on a fresh /proc, or
    one sandbox per job; None otherwise."""
    if os.environ.get(NURSERY_ENV) == "0":
        return None
    submounts = host_proc.proc_submounts()
    if not submounts:
        return None
    return host_proc.nursery_unusable(submounts) or (
        f"grader: /proc has {', '.join(submounts[:3])} mounted inside it (as the NVIDIA container toolkit does): "
        "each nursery starts on a fresh /proc of its own"
    )


class JobProcess:
    """One job of a nursery, as worker_pool.py sees a worker process."""

    def __init__(self, stdin, stdout: socket.socket, pid: int | None):
        self.stdin, self._socket, self.pid = stdin, stdout, pid
        self.stdout = stdout.makefile("r", encoding="utf-8", newline="\n")
        self._pidfd = None
        if pid is not None:
            try:
                self._pidfd = os.pidfd_open(pid)
            except OSError:  # it ended already
                self._pidfd = None

    def wait(self, timeout: float | None = None) -> None:
        if self._pidfd is not None:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"nursery job {self.pid}", timeout)
            os.close(self._pidfd)
            self._pidfd = None
        self.stdout.close()
        self._socket.close()


class Nursery:
    def __init__(self, worker_args: list[str], masked: bool, jobs: int):
        argv = [sys.executable, "-m", "grader.isolation.nursery", *worker_args]
        box = Sandbox(argv, None, masked, jobs, nursery=True)
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stderr = None if os.environ.get("GRADER_SANDBOX_STDERR") else subprocess.DEVNULL
        with theirs:
            self.proc = subprocess.Popen(
                host_proc.fresh_proc_prefix() + box.argv,
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=box.env,
                start_new_session=True,
            )

    def start(
        self, submission: str | None, group=None, probe: bool | list = False, uid: int | None = None
    ) -> JobProcess | None:
        """The job's process, or None if this nursery could not start it (dead, or not answering). group: the
        job's cgroups (job_limits.JobGroup), which its first process enters before it forks anything. probe: the
        job runs the CUDA probe rank (engine/cuda_probe.py) instead of grading, and reports on its result channel
        ([world size, widest run]: each GPU group's NCCL run too).
        uid: as root, the job's own uid (slot_uids.py), which it takes before it reads the submission (nursery_job.py)."""
        if self.proc.poll() is not None:
            return None
        pid = 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        line_r, line_w = os.pipe()
        fds = [theirs.fileno(), line_r]
        if submission is not None:
            fds.append(os.open(submission, os.O_RDONLY | os.O_CLOEXEC))
        try:
            socket.send_fds(self.control, [json.dumps({"fds": len(fds), "probe": probe, "uid": uid}).encode()], fds)
            theirs.close()  # before the wait: a job (or nursery) that dies before its hello then reads as EOF at once
            ours.settimeout(HELLO_S)
            hello, ancillary, _, _ = ours.recvmsg(1, socket.CMSG_SPACE(_UCRED))
            pid = next(
                struct.unpack("3i", data[:_UCRED])[0]
                for level, kind, data in ancillary
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
            )
            if hello != b"H" or pid <= 0:  # at EOF (the job or its nursery died first) SO_PASSCRED still hands
                raise OSError("no hello from the job")  # credentials, with pid 0: killing "0" is our own group
            if group is not None:
                group.add(pid)
            ours.sendall(b"G")
        except (OSError, StopIteration):
            os.close(line_w)
            ours.close()
            if pid > 0:
                kill_tree(pid)  # answered, but could not be put in its cgroups: it never runs
            return None
        finally:
            theirs.close()  # (closing twice is harmless)
            for fd in fds[1:]:
                os.close(fd)
        ours.settimeout(None)
        return JobProcess(os.fdopen(line_w, "w", buffering=1, encoding="utf-8"), ours, pid)

    def close(self) -> None:
        self.control.close()
        kill_tree(self.proc.pid)  # bwrap's PID 1 ends: the kernel ends every job inside
        self.proc.wait(timeout=10)


class Nurseries:
    """The public phase's nursery (hidden checks masked) and the hidden phase's; a dead one is replaced when needed."""

    def __init__(self, worker_args: list[str], jobs: int):
        self.worker_args, self.jobs = worker_args, jobs
        self.by_kind = {masked: Nursery(worker_args, masked, jobs) for masked in (True, False)}  # both start now:
        # the hidden phase's cold start overlaps the first public jobs

    def start(self, path: str | None, masked: bool, group=None, uid: int | None = None) -> JobProcess:
        for _ in range(2):  # a dead nursery is replaced once per job
            nursery = self.by_kind.get(masked)
            if nursery is None:
                nursery = self.by_kind[masked] = Nursery(self.worker_args, masked, self.jobs)
            proc = nursery.start(path, group, uid=uid)
            if proc is not None:
                return proc
            nursery.close()
            del self.by_kind[masked]
        ours, theirs = socket.socketpair()  # never started: reads as a worker that ended (worker_pool.py: lost)
        theirs.close()
        line_r, line_w = os.pipe()
        os.close(line_r)
        return JobProcess(os.fdopen(line_w, "w"), ours, None)

    def close(self) -> None:
        for nursery in self.by_kind.values():
            nursery.close()
        self.by_kind.clear()
