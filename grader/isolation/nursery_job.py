"""One job forked from a nursery (nursery.py): isolate, then grade one submission as grading_worker.py would.

Three processes, each dying with its parent (PR_SET_PDEATHSIG):
- the job's first process, in the nursery's namespaces: tells the parent its pid (SCM_CREDENTIALS: the
  kernel translates it into the parent's PID namespace, so the parent can kill the job, and move it into
  the job's own cgroups before it answers with a go byte), reads the
  submission from the parent's descriptor, takes the job's own uid as root (slot_uids.py), unshares a user
  (its uid mapped, non-root), mount, PID, network, IPC and UTS namespace, bounds its processes there
  (job_limits.bound_own_processes), and waits for
- PID 1 of the new PID namespace, the job's reaper: it mounts the namespace's own /proc (writable: CUDA), fresh tmpfs on
  /tmp, HOME and /dev/shm, the submission on a read-only tmpfs at sandbox.SUBMISSION, brings `lo` up,
  drops every capability (no_new_privs is set already), forks the worker and reaps every orphan until the
  worker ends; then it exits, and the kernel kills whatever the job left in its PID namespace;
- the worker: it takes the job-line pipe and the result socket on private descriptors (result_channel.py), with fd 0
  on /dev/null and fd 1 on stderr, forks the ranks' forkserver and
  grades its one job (grade_job.worker_main), as grading_worker.py does after its cold start.

/proc: a process in a new user namespace may mount proc only if a proc mount it can see is fully visible
(the kernel's mnt_already_visible), and no less read-only: that mount is writable, so the job's /proc can be. bubblewrap, run as root, covers /proc/sys, /proc/irq, /proc/bus and
/proc/sysrq-trigger of the sandbox's /proc with read-only binds, which the job's mount namespace inherits
locked: the mount is refused (EPERM). The nursery's sandbox therefore also binds the host's /proc (writable;
the nursery runs no student code) under NURSERY_DIR, which each job covers with an empty tmpfs right after it
has mounted its own /proc. Where the host's /proc has submounts (the NVIDIA container toolkit's tmpfs on
/proc/driver/nvidia), it is not fully visible: as root the nursery then starts on a fresh /proc (host_proc.py).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import traceback

from grader.engine import processes
from grader.isolation import job_limits
from grader.isolation import namespaces as ns
from grader.isolation import sandbox

NAMESPACES = ns.CLONE_NEWUSER | ns.CLONE_NEWNS | ns.CLONE_NEWPID | ns.CLONE_NEWNET | ns.CLONE_NEWIPC | ns.CLONE_NEWUTS
INSIDE_ID = 65534  # the job's uid and gid in its own user namespace: not root there either
_TMPFS = ns.MS_NOSUID | ns.MS_NODEV


def run(args, header: dict, fds: list[int]) -> int:
    result, job_line, *submission_fd = fds
    processes.die_with_parent(required=True)
    hello = struct.pack("3i", os.getpid(), os.getuid(), os.getgid())
    with socket.socket(fileno=os.dup(result)) as channel:
        channel.sendmsg([b"H"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, hello)])
        if channel.recv(1) != b"G":  # the parent's go: this process is in the job's cgroups now (job_limits.py)
            return 1
    data = None
    if submission_fd:
        with os.fdopen(submission_fd[0], "rb") as f:
            data = f.read()
    _keep_only(result, job_line)
    last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
    if isinstance(header.get("uid"), int) and header["uid"] > 0:  # as root: the job's own uid (slot_uids.py)
        _become(header["uid"])
    uid, gid = os.getuid(), os.getgid()
    ns.unshare(NAMESPACES)  # every capability of the nursery's is gone now; all are this namespace's own
    ns.map_ids(INSIDE_ID, uid, INSIDE_ID, gid)
    ns.prctl(ns.PR_SET_DUMPABLE, 0)  # no process of the job, the same uid, may ptrace this one
    job_limits.bound_own_processes()  # RLIMIT_NPROC counted in this user namespace: this job's processes alone
    ns.mount("none", "/", None, ns.MS_REC | ns.MS_PRIVATE)
    probe = header.get("probe")  # gpu_gate.py: [world size, widest run], or true
    probe = probe if probe is True or (isinstance(probe, list) and all(isinstance(n, int) for n in probe)) else False
    reaper = _fork_running(_reaper, args, data, result, job_line, last_cap, probe)
    os.close(result)
    os.close(job_line)
    _, status = os.waitpid(reaper, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


def _become(uid: int) -> None:
    """Take the job's own uid and gid (no supplementary group). The nursery holds CAP_SETUID and CAP_SETGID for
    this alone; the uid map is written next, which a non-dumpable process (as a uid change makes it) may not."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    ns.prctl(ns.PR_SET_DUMPABLE, 1)


def _reaper(args, data: bytes | None, result: int, job_line: int, last_cap: int, probe=False) -> int:
    processes.die_with_parent(required=True)
    # writable: NVIDIA's driver names its threads through /proc/self/task/<tid>/comm in cuInit (a process writes
    # only its own files; /proc/sys stays the host root's, and the job holds no capability)
    ns.mount("proc", "/proc", "proc", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC)
    _hide_keys()
    ns.mount("tmpfs", sandbox.NURSERY_DIR, "tmpfs", ns.MS_RDONLY | _TMPFS | ns.MS_NOEXEC, "size=4k,mode=0")
    held = _hold_prefixes_under(("/tmp", sandbox.HOME))
    for folder in ("/tmp", sandbox.HOME, "/dev/shm"):
        ns.mount("tmpfs", folder, "tmpfs", _TMPFS, f"mode=1777,size={sandbox.TMP_BYTES}")
    _bind_back(held)
    folder = os.path.dirname(sandbox.SUBMISSION)
    ns.mount("tmpfs", folder, "tmpfs", _TMPFS | ns.MS_NOEXEC, f"mode=0755,size={sandbox.TMP_BYTES}")
    if data is not None:
        with open(sandbox.SUBMISSION, "wb") as f:
            f.write(data)
        os.chmod(sandbox.SUBMISSION, 0o444)
    ns.mount("none", folder, None, ns.MS_REMOUNT | ns.MS_RDONLY | _TMPFS | ns.MS_NOEXEC)
    for shared in ("/", "/dev"):  # the nursery's own tmpfs, which every job of it sees: read-only to each
        _read_only(shared)
    ns.loopback_up()
    os.chdir("/tmp")
    ns.drop_capabilities(last_cap)
    ns.prctl(ns.PR_SET_DUMPABLE, 0)  # the job's code cannot ptrace or read PID 1 (its /proc files are root's)
    worker = _fork_running(_worker, args, result, job_line, probe)
    os.close(result)
    os.close(job_line)
    while True:  # PID 1: every orphan of the job comes here
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        if pid == worker:
            return os.waitstatus_to_exitcode(status) & 0xFF


def _hide_keys() -> None:
    """/proc/keys and /proc/key-users read as empty, as in a sandbox of its own (sandbox._hide_keys says why), in
    the job's /proc and in the nursery's copy of the host's: with both covered no proc mount of this namespace is
    fully visible, so no namespace nested in the job can mount a proc of its own that shows them whole again."""
    for proc in ("/proc", os.path.join(sandbox.NURSERY_DIR, "proc")):
        for name in sandbox.KEY_FILES:
            path = os.path.join(proc, os.path.relpath(name, "/proc"))
            if os.path.exists(path):
                ns.mount("/dev/null", path, None, ns.MS_BIND)


def _read_only(path: str) -> None:
    """This job's view of the mount at `path` read-only (its own submounts stay as they are). The nursery's sandbox
    root and /dev are one tmpfs for all its jobs; run as another user than root, bubblewrap made their folders (/,
    /etc, the parents of the bound prefixes) that user's, which is each job's uid too: a job could leave a file there
    for the next (an /etc/ld.so.preload for a classmate's processes). The flags the nursery's namespace locked
    (nosuid, nodev, noexec, atime) are kept, as a remount from a user namespace must."""
    locked = os.statvfs(path).f_flag & (
        os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME | os.ST_RELATIME
    )
    ns.mount("none", path, None, ns.MS_REMOUNT | ns.MS_BIND | ns.MS_RDONLY | locked)


def _fork_running(fn, *args) -> int:
    """Fork a child that runs fn(*args) and leaves with its exit code (1, its traceback on stderr, if it raised)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = fn(*args)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _hold_prefixes_under(folders: tuple[str, ...]) -> list[tuple[str, int]]:
    """Python, the venv and grader/ where they lie under a folder the job gets fresh (a CI checkout under /tmp):
    the fresh tmpfs would hide their read-only binds, so each is held open (O_PATH) to be bound back on it."""
    inside = [p for p in sandbox.read_only_prefixes() if any(p.startswith(f + os.sep) for f in folders)]
    return [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in inside]


def _bind_back(held: list[tuple[str, int]]) -> None:
    """Bind each held prefix at its own path in the fresh tmpfs, read-only, with what is bound inside it (the
    masked hidden checks): a recursive bind keeps those, locked to it, so they cannot be uncovered."""
    for path, fd in held:
        for parent in _parents_below_root(path):
            if not os.path.isdir(parent):
                os.mkdir(parent, 0o755)
        ns.mount(f"/proc/self/fd/{fd}", path, None, ns.MS_BIND | ns.MS_REC)
        ns.mount("none", path, None, ns.MS_REMOUNT | ns.MS_BIND | ns.MS_RDONLY | ns.MS_NOSUID | ns.MS_NODEV)
        os.close(fd)


def _parents_below_root(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _worker(args, result: int, job_line: int, probe=False) -> int:
    processes.die_with_parent(required=True)
    from grader.isolation import result_channel as channel

    channel.take(job_line, result)  # nothing the worker starts (the resource tracker, ranks) holds either
    from grader.engine import forked_forkserver
    from grader.gradebook.grade_job import worker_main

    forked_forkserver.start_here()
    if probe:  # gpu_gate.py: what a rank of this job sees of CUDA, before any submission is graded
        from grader.engine import cuda_probe

        job = tuple(probe[:2]) if isinstance(probe, list) and len(probe) == 2 else None
        channel.send(json.dumps(cuda_probe.probe(job=job)))  # the nursery imported the public checks; forkserver forked
        return 0
    return worker_main(args.assignment, args.timeout, args.world_size, args.version)


def _keep_only(*fds: int) -> None:
    """Close every descriptor but stderr and `fds` (the nursery's control socket on fd 0 among them)."""
    keep = sorted({2, *fds})
    os.closerange(0, keep[0])
    for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
        os.closerange(low + 1, high)
