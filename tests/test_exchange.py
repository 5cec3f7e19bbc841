"""An exchange that knows who submitted (grader/gradebook/vetted_collect.py).

Real accounts (useradd; root only) share nbgrader's default exchange, as on the hub: the
instructor releases 02_ddp_basics, Alice and Bob fetch and submit with `nbgrader submit`
from the students' environment (deploy/hub/student_env.py). Then Bob, as Bob, places
submissions by hand in `inbound/`: one named for Alice (newer than hers), one postdated,
one backdated, one whose timestamp.txt (the time nbgrader grades) is earlier than its
name, one whose notebook is a link to the instructor's solution, one with a 3 GiB sparse file. nbgrader's plain collect
takes the forgery as Alice's work and the postdated one as Bob's (the attack is real);
`nbgrader collect` with the course's nbgrader_config.py (so the formgrader's Collect button) and
`python -m grader collect` (make collect) refuse each with one line saying why, and collect Alice's
and Bob's own submissions byte for byte, in 0755 folders of 0644 files.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import stat
import tempfile
from datetime import datetime, timedelta, timezone

import pytest

from grader.gradebook import roundtrip
from tests.accounts import accounts, as_user, home, instructor_python, missing, student_env
from tests.helpers import ROOT

A = "02_ddp_basics"
COURSE_ID = "ddp-course"
TEACHER, ALICE, BOB = "ddpx-teacher", "ddpx-alice", "ddpx-bob"

pytestmark = [pytest.mark.skipif(bool(missing()), reason=missing() or "-"), pytest.mark.timeout(900)]

# Bob's hand-made submissions: (folder name's time, timestamp.txt's time, the notebook, what collect must say)
FORGERIES = {
    "for-alice": "owned by ddpx-bob, not ddpx-alice",
    "postdated": "in the future: postdated",
    "backdated": "backdated",
    "mismatch": "its timestamp.txt says",
    "link": "is a link",
    "sparse": "more than the 100.0 MiB a submission may hold",
}


@pytest.fixture(scope="module")
def klass():
    shared = tempfile.mkdtemp(prefix="exchange-test-")
    os.chmod(shared, 0o755)
    try:
        with accounts([TEACHER, ALICE, BOB]):
            exchange = os.path.join(shared, "exchange")
            os.makedirs(exchange)
            os.chmod(exchange, 0o1777)  # nbgrader's docs: everyone writes, the sticky bit keeps them apart
            course = os.path.join(home(TEACHER), "course")
            os.makedirs(os.path.join(course, "exercises"))
            shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), course)
            shutil.copytree(os.path.join(ROOT, "exercises", A), os.path.join(course, "exercises", A))
            shutil.copytree(os.path.join(ROOT, "solutions", A), os.path.join(course, "solutions", A))
            teacher_python = instructor_python(os.path.join(home(TEACHER), "env"))
            shutil.chown(course, TEACHER, TEACHER)
            for folder, dirs, files in os.walk(course):
                for name in dirs + files:
                    shutil.chown(os.path.join(folder, name), TEACHER, TEACHER)
            yield {
                "exchange": exchange,
                "course": course,
                "teacher": teacher_python,
                "student": student_env(os.path.join(shared, "student-env")),
            }
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _env(klass, user: str, python: str, **more) -> list[str]:
    return [
        "env",
        f"PATH={os.path.dirname(python)}:/usr/bin:/bin",
        f"HOME={home(user)}",
        f"NBGRADER_EXCHANGE={klass['exchange']}",
        *(f"{k}={v}" for k, v in more.items()),
    ]


def _ok(proc, what: str) -> str:
    assert proc.returncode == 0, f"{what} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


def _teacher(klass, *cmd: str, cwd: str | None = None) -> str:
    return _ok(
        as_user(TEACHER, *_env(klass, TEACHER, klass["teacher"]), klass["teacher"], *cmd, cwd=cwd or klass["course"]),
        f"{cmd} as the instructor",
    )


def _student(klass, user: str, *cmd: str) -> str:
    config = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(klass["student"]))), "jupyter-config")
    env = _env(klass, user, klass["student"], JUPYTER_CONFIG_PATH=config)
    return _ok(as_user(user, *env, klass["student"], *cmd, cwd=home(user)), f"{cmd} as {user}")


def _submit(klass, user: str) -> bytes:
    """Fetch, write a mark of the student's own into the notebook, submit; the bytes submitted."""
    _student(klass, user, "-m", "nbgrader", "fetch_assignment", A)
    notebook = os.path.join(home(user), COURSE_ID, A, f"{A}.ipynb")
    script = (
        f"import json; p = {notebook!r}; nb = json.load(open(p)); nb['metadata']['whose'] = {user!r}; "
        "json.dump(nb, open(p, 'w'))"
    )
    _student(klass, user, "-c", script)
    _student(klass, user, "-m", "nbgrader", "submit", A)
    with open(notebook, "rb") as f:
        return f.read()


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f %Z")  # nbgrader's timestamp_format, in UTC


def _forge(klass) -> None:
    """As Bob: hand-made folders in inbound/ (which he may write, not list)."""
    now = datetime.now(timezone.utc)
    day = timedelta(days=1)
    solution = os.path.join(klass["course"], "solutions", A, f"{A}.ipynb")
    plan = {  # tag: (the student named, name's time, timestamp.txt's time, notebook is a link)
        "for-alice": (ALICE, now, now, False),
        "postdated": (BOB, now + day, now + day, False),
        "backdated": (BOB, now - day, now - day, False),
        "mismatch": (BOB, now, now - day, False),
        "link": (BOB, now, now, True),
        "sparse": (BOB, now, now, False),  # with a 3 GiB sparse file: no blocks on disk, 3 GiB once copied
    }
    inbound = os.path.join(klass["exchange"], COURSE_ID, "inbound")
    mine = os.path.join(home(BOB), COURSE_ID, A, f"{A}.ipynb")
    for tag, (student, name_time, file_time, link) in plan.items():
        folder = os.path.join(inbound, f"{student}+{A}+{_stamp(name_time)}+{tag}")
        make_notebook = (
            f"os.symlink({solution!r}, os.path.join(d, {A + '.ipynb'!r}))" if link else f"shutil.copy({mine!r}, d)"
        )
        if tag == "sparse":
            make_notebook += f"; os.truncate(open(os.path.join(d, 'weights.bin'), 'x').name, {3 << 30})"
        script = (
            f"import os, shutil; d = {folder!r}; os.mkdir(d); {make_notebook}; "
            f"open(os.path.join(d, 'timestamp.txt'), 'w').write({_stamp(file_time)!r})"
        )
        _student(klass, BOB, "-c", script)


def _collected(course: str, student: str) -> tuple[bytes, str]:
    folder = os.path.join(course, "submitted", student, A)
    with open(os.path.join(folder, f"{A}.ipynb"), "rb") as nb, open(os.path.join(folder, "timestamp.txt")) as ts:
        return nb.read(), ts.read().strip()


def _whose(notebook: bytes) -> str:
    return json.loads(notebook)["metadata"].get("whose", "")


def test_bob_cannot_submit_as_alice_nor_backdate_nor_postdate(klass):
    _teacher(klass, "-m", "nbgrader", "release_assignment", A, "--log-level=WARN")
    alices, bobs = _submit(klass, ALICE), _submit(klass, BOB)
    inbound = os.path.join(klass["exchange"], COURSE_ID, "inbound")
    [bobs_folder] = glob.glob(os.path.join(inbound, f"{BOB}+{A}+*"))
    with open(os.path.join(bobs_folder, "timestamp.txt")) as f:
        bobs_time = f.read().strip()
    _forge(klass)

    # nbgrader's plain collect, in a copy of the course: the forgeries win (what this test defends against)
    plain = klass["course"] + "-plain"
    vetted_cli = klass["course"] + "-grader-collect"
    for copy in (plain, vetted_cli):
        _ok(as_user(TEACHER, "cp", "-a", klass["course"], copy), "copying the course")
    _teacher(klass, "-m", "nbgrader", "collect", A, "--log-level=WARN", roundtrip.PLAIN_COLLECT, cwd=plain)
    assert _whose(_collected(plain, ALICE)[0]) == BOB, "plain nbgrader collect did not take Bob's forgery"
    assert _collected(plain, BOB)[1] != bobs_time

    # every collect of the course is vetted: `nbgrader collect` (the formgrader's Collect button runs the same
    # with the course's nbgrader_config.py) and `python -m grader collect` (make collect); each forgery refused
    # with its reason, the students' own work collected, in folders no other account may write
    for course, cmd in ((klass["course"], ["-m", "nbgrader"]), (vetted_cli, ["-m", "grader"])):
        out = _teacher(klass, *cmd, "collect", A, cwd=course)
        refused = [line for line in out.splitlines() if "REFUSED" in line]
        for tag, reason in FORGERIES.items():
            [line] = [line for line in refused if f"+{tag}: " in line] or [f"no line for {tag} in:\n{out}"]
            assert reason in line, line
        assert len(refused) == len(FORGERIES), refused
        assert _collected(course, ALICE)[0] == alices
        assert _collected(course, BOB) == (bobs, bobs_time)
        for student in (ALICE, BOB):
            folder = os.path.join(course, "submitted", student, A)
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755, oct(os.stat(folder).st_mode)
            assert {stat.S_IMODE(os.stat(os.path.join(folder, n)).st_mode) for n in os.listdir(folder)} == {0o644}
