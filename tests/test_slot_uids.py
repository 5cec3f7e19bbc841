"""Each job's own uid (grader/isolation/slot_uids.py): never an account's, a subuid range's, a running process's or
another grading run's, nor one that holds a kernel key, and a freed one is taken again last. Graded classes show
the uids in use: tests/test_nursery.py and tests/test_sandbox.py (each job's host uid), tests/test_job_limits.py (no
cgroups: a fork bomb stops at its own uid's budget)."""

import os
import pwd
import subprocess
import sys

import pytest

from grader.isolation import slot_uids
from grader.isolation.slot_uids import SlotUids


def _private(tmp_path, monkeypatch, start: int):
    folder = tmp_path / "locks"
    monkeypatch.setattr(slot_uids, "LOCK_DIR", str(folder))
    monkeypatch.setenv("GRADER_SLOT_UIDS_FROM", str(start))


def test_no_account_nor_running_process_owns_a_slot_uid(tmp_path, monkeypatch):
    _private(tmp_path, monkeypatch, pwd.getpwnam("nobody").pw_uid - 1)  # the range starts just below nobody
    uids = SlotUids.here(3)
    try:
        taken = [uids.take() for _ in range(3)]
    finally:
        uids.close()
    assert pwd.getpwnam("nobody").pw_uid not in taken and len(set(taken)) == 3, taken
    assert os.getuid() not in taken and os.stat(str(tmp_path / "locks")).st_mode & 0o077 == 0


def test_two_runs_never_share_a_uid_and_a_freed_one_comes_back_last(tmp_path, monkeypatch):
    _private(tmp_path, monkeypatch, 1_950_000_000)
    first, second = SlotUids.here(2), SlotUids.here(2)
    try:
        a, b = first.take(), first.take()
        assert not {a, b} & {second.take(), second.take()}
        first.give(a)
        first.give(b)
        assert first.take() == a and first.take() == b
        assert first.take() not in (a, b)  # none free: one more is locked, never one of the other run's
    finally:
        first.close()
        second.close()


HOLDER = """
import ctypes, os, platform, sys
from grader.isolation.slot_uids import SlotUids
add_key, _, keyctl = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
uid = int(sys.argv[1])
assert libc.syscall(keyctl, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING: a fresh one, gone when this process ends
pid = os.fork()
if pid == 0:  # a key of uid's own, linked into this process's session keyring: it outlives the child
    os.setresuid(uid, uid, uid)
    os._exit(0 if libc.syscall(add_key, b"user", b"slot-uid-test", b"x", 1, ctypes.c_int(-3)) > 0 else 1)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
held = open("/proc/key-users").read()
uids = SlotUids.here(2)
print(" ".join(str(uids.take()) for _ in range(2)), f"{uid}:" in held)
uids.close()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a key is added as another uid")
def test_a_uid_that_holds_a_kernel_key_is_skipped(tmp_path, monkeypatch):
    """Keys outlive every process of their uid: a slot uid that holds one is never a job's."""
    start = 1_960_000_000 + os.getpid() % 10_000
    _private(tmp_path, monkeypatch, start)
    done = subprocess.run([sys.executable, "-c", HOLDER, str(start)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, second, held = done.stdout.split()
    assert held == "True" and [int(first), int(second)] == [start + 1, start + 2], done.stdout
