"""One uid of its own per grading job, as root: student code never shares a uid with another job or anyone.

    uids = SlotUids.here(count)   # as root, once per run: `count` uids no account, subuid range or process has
    uid = uids.take()             # per job: the free uid that has been free longest
    uids.give(uid)                # when the job has been killed
    uids.close()

A uid is a kernel-wide identity: two jobs of one uid may ptrace or signal each other's processes where they can
see them, and RLIMIT_NPROC counts every process of a uid across the machine, so a fork bomb in one job took the
processes of every other. The uids come from a fixed range (GRADER_SLOT_UIDS_FROM, default SLOT_UIDS_FROM) far
above any account's and below 2**31; a uid is skipped if /etc/passwd or /etc/group names it, /etc/subuid or
/etc/subgid hands it to someone's containers, a process runs as it, it holds a kernel key (/proc/key-users: a
key outlives its uid's processes, and the sandbox's seccomp filter keeps jobs from adding any), or another grading
run holds its lock (an flock in LOCK_DIR, root's alone). Each job's gid is the same number, with no supplementary groups. A uid freed
is taken again last, so a job's processes are long gone (its PID namespace ended) before the uid serves again.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import stat
from collections import deque

SLOT_UIDS_FROM = 1_900_000_000
LOCK_DIR = "/run/ddp-grader-uids"
SCAN = 4096  # uids looked at before giving up


def _sub_ranges() -> list[range]:
    found = []
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            with open(path) as f:
                for line in f:
                    parts = line.strip().split(":")
                    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                        found.append(range(int(parts[1]), int(parts[1]) + int(parts[2])))
        except OSError:
            pass
    return found


def _running_uids() -> set[int]:
    """The real, effective and saved uids of every process (/proc/PID/status: right even for a non-dumpable one)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    line = next(line for line in f if line.startswith("Uid:"))
                found.update(int(u) for u in line.split()[1:])
            except (OSError, StopIteration):
                pass
    return found


def key_holders() -> set[int]:
    """The uids that hold kernel keys (/proc/key-users): keys are in no namespace and outlive every process of a uid,
    so a uid that holds some (left by an older grader, or by anything else) is never a job's."""
    found = set()
    try:
        with open("/proc/key-users") as f:
            for line in f:
                uid = line.split(":", 1)[0].strip()
                if uid.isdigit():
                    found.add(int(uid))
    except OSError:  # a kernel without keys
        pass
    return found


def _named(uid: int) -> bool:
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def _lock_dir() -> str:
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    info = os.lstat(LOCK_DIR)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise OSError(f"{LOCK_DIR} is not a private folder of uid {os.geteuid()}")
    return LOCK_DIR


class SlotUids:
    def __init__(self):
        self._locks: dict[int, int] = {}  # uid -> its lock's descriptor, held for the run
        self._free: deque[int] = deque()
        self._next = self.start()

    @staticmethod
    def start() -> int:
        return int(os.environ.get("GRADER_SLOT_UIDS_FROM") or SLOT_UIDS_FROM)

    @classmethod
    def here(cls, count: int) -> "SlotUids":
        made = cls()
        made._acquire(count)
        return made

    def _acquire(self, count: int) -> None:
        folder, subs, taken = _lock_dir(), _sub_ranges(), _running_uids() | key_holders()
        uid = self._next
        while count > 0:
            if uid >= self.start() + SCAN or uid >= 2**31 - 1:
                raise OSError(f"no free uid for a grading job in {self.start()}..{uid} (GRADER_SLOT_UIDS_FROM)")
            if uid not in taken and not _named(uid) and not any(uid in r for r in subs):
                fd = os.open(
                    os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)  # another grading run's
                else:
                    self._locks[uid] = fd
                    self._free.append(uid)
                    count -= 1
            uid += 1
        self._next = uid

    def take(self) -> int:
        if not self._free:
            self._acquire(1)
        return self._free.popleft()

    def give(self, uid: int) -> None:
        if uid in self._locks and uid not in self._free:
            self._free.append(uid)

    def close(self) -> None:
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
        self._free.clear()
