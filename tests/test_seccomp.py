"""The sandbox's seccomp filter (grader/isolation/seccomp_filter.py), seen from inside a sandbox.

A process run in a grading sandbox (sandbox.Sandbox, as `make grade` builds it) makes each denied call with
arguments that would fail otherwise with another error (or, for the key calls, succeed): every one fails with
EPERM there, while the same harmless calls outside the sandbox do not. As root and as a fresh non-root account.
A 2-rank gloo run still works under the filter, and the sandbox's root and /dev are read-only.
The hostile class (tests/test_hostile_class.py, kernel_keys) and tests/test_result_channel.py show the same in
graded classes, in both sandbox modes.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pyseccomp
import pytest

from grader.isolation import sandbox as sandboxes
from grader.isolation.seccomp_filter import DENIED
from tests import accounts
from tests.helpers import ROOT, needs_bwrap

pytestmark = [needs_bwrap, pytest.mark.timeout(600)]
NUMBERS = {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in DENIED}
# calls that do nothing outside the filter either: bad arguments (the key calls look up a keyring that is not
# there, or add nothing); kexec and module loading are made only inside the sandbox
HARMLESS = {
    "add_key": "b'user', None, None, 0, 0",  # no description, no keyring: EINVAL
    "request_key": "b'user', None, None, 0",
    "keyctl": "0, -1, 0",  # the thread keyring's id, not created: ENOKEY
    "bpf": "-1, None, 0",
    "perf_event_open": "None, 0, -1, -1, 0",
    "userfaultfd": "-1",
    "io_uring_setup": "0, None",
    "kexec_load": "0, 0, None, -1",
    "kexec_file_load": "-1, -1, 0, None, -1",
    "init_module": "None, 0, None",
    "finit_module": "-1, None, -1",
}
CALLS = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, (number, args) in json.loads(sys.argv[1]).items():
    result = libc.syscall(number, *eval("(" + args + ",)"))
    out[name] = ctypes.get_errno() if result == -1 else "returned %d" % result
for folder in ("/", "/etc", "/dev"):
    try:
        open(os.path.join(folder, "planted"), "w").close()
        out[folder] = "written"
    except OSError as exc:
        out[folder] = exc.errno
print(json.dumps(out))
"""
GLOO = """
import json
import torch
import torch.distributed as dist
from grader.engine import run_distributed

def all_reduce(ctx):
    t = torch.ones(2) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    return t.tolist()

result = run_distributed(all_reduce, 2, timeout=120)
print(json.dumps([[r.status, r.value] for r in result.ranks]))
"""


def _calls(names) -> str:
    return json.dumps({name: (NUMBERS[name], HARMLESS[name]) for name in names})


def _in_sandbox(code: str, *args: str) -> str:
    box = sandboxes.Sandbox([sys.executable, "-c", code, *args], None, True, 1)
    done = subprocess.run(box.argv, env=box.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_every_denied_call_fails_with_eperm_in_a_sandbox_and_not_outside():
    assert set(HARMLESS) == set(DENIED)
    inside = json.loads(_in_sandbox(CALLS, _calls(DENIED)))
    assert {name: inside[name] for name in DENIED} == {name: errno.EPERM for name in DENIED}, inside
    assert {inside[f] for f in ("/", "/etc", "/dev")} == {errno.EROFS}, inside
    # the same calls outside any sandbox: not refused (kexec and modules left out: root could load them)
    outside_names = ["add_key", "request_key", "keyctl", "perf_event_open", "userfaultfd", "io_uring_setup"]
    done = subprocess.run(
        [sys.executable, "-c", CALLS.replace('("/", "/etc", "/dev")', "()"), _calls(outside_names)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    outside = json.loads(done.stdout)
    assert all(outside[name] != errno.EPERM for name in outside_names), outside


def test_a_two_rank_gloo_run_works_under_the_filter():
    assert json.loads(_in_sandbox(GLOO)) == [["ok", [3.0, 3.0]], ["ok", [3.0, 3.0]]]


@pytest.mark.skipif(bool(accounts.missing()), reason=accounts.missing() or "-")
def test_as_a_non_root_account_every_denied_call_fails_with_eperm(tmp_path):
    """The sandbox an ordinary instructor account builds (a user namespace, no setpriv) loads the same filter."""
    with accounts.accounts(["secprof"]):
        python = accounts.instructor_python(os.path.join(accounts.home("secprof"), "env"))
        subprocess.run(["chown", "-R", "secprof:secprof", accounts.home("secprof")], check=True, timeout=60)
        script = (
            "import subprocess, sys\nfrom grader.isolation import sandbox\n"
            f"box = sandbox.Sandbox([sys.executable, '-c', {CALLS!r}, sys.argv[1]], None, True, 1)\n"
            "done = subprocess.run(box.argv, env=box.env, capture_output=True, text=True, timeout=300)\n"
            "print(done.stdout + done.stderr)\n"
        )
        done = accounts.as_user(
            "secprof", "env", "-i", f"HOME={accounts.home('secprof')}", python, "-c", script, _calls(DENIED), cwd=ROOT
        )
    assert done.returncode == 0, done.stderr
    inside = json.loads(done.stdout.strip().splitlines()[-1])
    assert {name: inside[name] for name in DENIED} == {name: errno.EPERM for name in DENIED}, inside
    assert {inside[f] for f in ("/", "/etc", "/dev")} == {errno.EROFS}, inside


def test_without_libseccomp_grade_stops_in_one_line(tmp_path):
    """pyseccomp raises at import where libseccomp is missing; a module standing in for it does so here."""
    from grader.gradebook import roundtrip
    from samples.make_samples import solution_answers
    from tests.graded_class import A, notebook_with, place, run_grade

    course = roundtrip.make_course(str(tmp_path / "course"), [A])
    roundtrip.release(course, A)
    place(course, "ada", notebook_with(solution_answers()))
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pyseccomp.py").write_text('raise RuntimeError("Unable to find libseccomp")\n')
    done = run_grade(course.root, env=dict(os.environ, PYTHONPATH=str(shadow)))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "libseccomp" in lines[0] and "--no-sandbox" in lines[0], done.stderr
    assert not os.path.exists(os.path.join(course.root, "graded"))
