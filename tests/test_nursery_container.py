"""Nurseries in a GPU container: the NVIDIA container toolkit mounts a tmpfs on /proc/driver/nvidia, and then no job
of a nursery could mount its own /proc (the host's is not fully visible to a user namespace). As root the nursery
starts on a fresh /proc of its own (grader/isolation/host_proc.py); a class graded under such a /proc (a tmpfs on
/proc/driver, in a mount namespace of this test's) still gets full marks, sandboxed, from nurseries."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

import pytest

from grader.exercises import get_exercise
from grader.gradebook import roundtrip
from grader.isolation import host_proc
from samples.make_samples import solution_answers
from tests.graded_class import A, grade_args, notebook_with, place
from tests.helpers import ROOT, needs_bwrap

TOOLKIT_LIKE = 'mount --make-rprivate / && mount -t tmpfs tmpfs /proc/driver && exec "$@"'
MOUNTINFO = """\
22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
40 22 0:36 / /proc/sys/fs/binfmt_misc rw,relatime shared:20 - autofs systemd-1 rw
66 22 0:40 / /proc/driver/nvidia rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=555
67 27 0:41 / /run/a\\040b rw - tmpfs tmpfs rw
"""
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a tmpfs on /proc/driver needs root (CI runs as root)")


def test_submounts_are_read_from_mountinfo_and_binfmt_misc_is_accepted():
    assert host_proc.proc_submounts(MOUNTINFO) == ["/proc/driver/nvidia"]
    assert host_proc.proc_submounts(MOUNTINFO.splitlines()[0]) == []


def test_not_as_root_a_proc_with_submounts_means_one_sandbox_per_job(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert host_proc.fresh_proc_prefix(["/proc/driver/nvidia"]) == []
    why = host_proc.nursery_unusable(["/proc/driver/nvidia"])
    assert why.startswith("grader: one sandbox per job (GRADER_NURSERY=0)") and "/proc/driver/nvidia" in why
    assert host_proc.nursery_unusable([]) is None


def in_toolkit_like_namespace(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "--mount", "sh", "-c", TOOLKIT_LIKE, "sh", *argv], **kwargs)


@as_root
def test_the_tmpfs_on_proc_driver_stops_a_user_namespace_mounting_proc():
    """What every nursery job met before: the environment of the next test reproduces the toolkit's problem."""
    proc = in_toolkit_like_namespace(
        ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "Operation not permitted" in proc.stderr, proc.stderr


@as_root
@needs_bwrap
@pytest.mark.timeout(1200)
def test_a_class_grades_sandboxed_from_nurseries_under_a_toolkit_like_proc(tmp_path):
    assert shutil.which("unshare"), "util-linux's unshare is needed"
    root = str(tmp_path / "course")
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    place(course, "ada", notebook_with(solution_answers()))
    env = {k: v for k, v in os.environ.items() if k != "GRADER_NURSERY"}
    proc = in_toolkit_like_namespace(
        grade_args(root, jobs=1), capture_output=True, text=True, timeout=1100, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "each nursery starts on a fresh /proc of its own" in proc.stderr
    assert "one sandbox per job" not in proc.stderr
    [path] = glob.glob(os.path.join(root, "graded", A, "ada.json"))
    with open(path) as f:
        ada = json.load(f)
    assert ada["sandboxed"] is True
    assert ada["report"]["score"] == get_exercise(A).max_score, [c for c in ada["report"]["checks"] if not c["passed"]]
