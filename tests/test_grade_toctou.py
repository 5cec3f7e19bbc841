"""`make grade` grades what it checked, and only that: nothing reads submitted/ after its preflight.

Root grades a class of three (ada, bob, mallory: each full marks) whose submission folders are 0777, as nbgrader's
plain collect leaves them. Once the sandboxes start (after the preflight and the one read of every submission),
an unprivileged account (tests/accounts.py) swaps, in mallory's folder, her extra file for a link to a 0600 file of
root's and adds a link to /etc/shadow, and moves her notebook over bob's. nbgrader's own autograde step read
submitted/ again at the end and copied every extra file, through the links, into autograded/ (0444, readable by
that account); the moved notebook flagged innocent classmates. Now: no copy of either file anywhere in the course,
autograded/ holds each notebook (and its timestamp.txt) only, every student keeps exactly full marks, nobody is
flagged, bob's notebook is put back, and the run says in one line that someone outside the sandboxes changed it
(and, in one line, that other accounts can read this 0755 course).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time

import psutil
import pytest

from samples.make_samples import solution_answers
from tests.accounts import accounts, as_user, missing
from tests.graded_class import A, generated_course, grade_args, notebook_with, place
from tests.helpers import ROOT
from tests.servers import stop_tree

pytestmark = [pytest.mark.skipif(bool(missing()), reason=missing() or "-"), pytest.mark.timeout(1500)]
ATTACKER = "ddpx-toctou"
ATTACKER_PYTHON = "/usr/bin/python3"  # the venv's may live under root's private home
WAIT_S = 600  # a bound on a busy machine, not a verdict: each wait ends on an event


def _sandboxes_started(grade: subprocess.Popen) -> bool:
    try:
        children = psutil.Process(grade.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for child in children:
        try:
            if "bwrap" in os.path.basename((child.cmdline() or [""])[0]):
                return True
        except psutil.Error:
            continue
    return False


def _attack_script(course: str, secret: str) -> str:
    mallory, bob = (os.path.join(course, "submitted", s, A) for s in ("mallory", "bob"))
    return (
        f"import os; m, b = {mallory!r}, {bob!r}\n"
        f"os.remove(os.path.join(m, 'notes.txt')); os.symlink({secret!r}, os.path.join(m, 'notes.txt'))\n"
        "os.symlink('/etc/shadow', os.path.join(m, 'shadow.txt'))\n"
        f"os.rename(os.path.join(m, {A + '.ipynb'!r}), os.path.join(b, {A + '.ipynb'!r}))\n"
        "print('swapped')\n"
    )


@pytest.fixture
def klass():
    shared = tempfile.mkdtemp(prefix="toctou-")
    os.chmod(shared, 0o755)
    try:
        course = generated_course(os.path.join(shared, "course"))
        for student in ("ada", "bob", "mallory"):  # the same answers, each notebook marked as its author's
            place(course, student, notebook_with(solution_answers(), lambda nb: nb["metadata"].update(whose=student)))
            os.chmod(os.path.join(course.root, "submitted", student, A), 0o777)  # plain collect's mode
        with open(os.path.join(course.root, "submitted", "mallory", A, "notes.txt"), "w") as f:
            f.write("mallory's notes")
        vault = os.path.join(shared, "vault")
        os.mkdir(vault, 0o700)
        secret, token = os.path.join(vault, "secret"), secrets.token_hex(16)
        with open(os.path.join(vault, "secret"), "w") as f:
            f.write(token)
        os.chmod(secret, 0o600)
        with accounts([ATTACKER]):
            yield course, secret, token
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _course_files(root: str):
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                yield path


def test_files_swapped_after_the_checks_are_not_graded_copied_or_blamed(klass):
    course, secret, token = klass
    bobs = open(os.path.join(course.root, "submitted", "bob", A, f"{A}.ipynb"), "rb").read()
    with open(secret, "rb") as f, open("/etc/shadow", "rb") as g:
        forbidden = [f.read(), g.read()]
    grade = subprocess.Popen(
        grade_args(course.root), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not _sandboxes_started(grade) and grade.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        attack = as_user(ATTACKER, ATTACKER_PYTHON, "-c", _attack_script(course.root, secret), timeout=120)
        assert attack.returncode == 0 and "swapped" in attack.stdout, attack.stdout + attack.stderr
        assert grade.poll() is None, "the run ended before the swap: this run shows nothing, run it again"
        out, err = (b.decode() for b in grade.communicate(timeout=WAIT_S))
    finally:
        stop_tree(grade, grace_s=10)
    assert grade.returncode == 0, out + err

    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for student in ("ada", "bob", "mallory"):
        assert "44/44" in rows[student] and "FLAGGED" not in rows[student], out
    assert "bob's submission" in err and "not from a sandbox" in err, err
    assert f"other accounts on this machine can read {course.root} (0755)" in err, err  # course_access.py
    assert open(os.path.join(course.root, "submitted", "bob", A, f"{A}.ipynb"), "rb").read() == bobs
    for student in ("ada", "bob", "mallory"):
        assert sorted(os.listdir(os.path.join(course.root, "autograded", student, A))) == [
            f"{A}.ipynb",
            "timestamp.txt",
        ]
    for path in _course_files(course.root):
        with open(path, "rb") as f:
            data = f.read()
        assert token.encode() not in data and not any(x and x in data for x in forbidden), f"{path} holds a copy"
