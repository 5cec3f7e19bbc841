"""Each job's own uid (grader/isolation/slot_uids.py): never an account's, a subuid range's, a running process's or
another grading run's, and a freed one is taken again last. Graded classes show the uids in use:
tests/test_nursery.py and tests/test_sandbox.py (each job's host uid), tests/test_job_limits.py (no cgroups: a
fork bomb stops at its own uid's budget)."""

import os
import pwd

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
