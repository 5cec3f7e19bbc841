"""A hostile class: every submission tries one attack, and none gains anything.

One class of 02_ddp_basics is graded with `python -m grader grade` (the sandbox on, its default): two honest
students with the full solution, one control student, and one student per attack in tests/hostile/. The
control and every attacker share the same honest part (pick_backend and make_dataloader answered, the rest
left as released); each attacker's pick_device runs its attack in every rank of that task's checks, then raises
with what it got, so the attempt shows in its own check message. The class is graded twice, as an instructor
re-runs `make grade`: a forger left behind by the first run would be trusted by the second.

The class is graded as root, and again as an ordinary instructor account the test makes (tests/accounts.py),
its course, key and Python in its private home. A fork bomb (tests/hostile/limits/) joins the class,
reach_instructor goes for a process the grading account runs, and kernel_keys for a kernel key it planted.

Asserted: honest classmates get exactly full marks (every check), each attacker exactly the control's score (the
raise_hidden attacker also loses the hidden make_dataloader check its raise fails), the instructor's files are
unchanged byte for byte and the gradebook rows hold only the grader's scores (nbgrader's Gradebook API),
nothing of the class is left running, the test's TCP server (standing in for the hub and PostgreSQL) got no
connection, no hidden check source (nor the planted key) reaches a message or the autograded notebook, each
refused attempt is in the attacker's report, and no slot uid (nor the account) holds a kernel key it did not hold.

HOSTILE_CLASS_GRADE_ARGS=--no-sandbox runs the same class unsandboxed: the test then fails, and which of its
assertions fail is the README's list of what the sandbox alone defends (HOSTILE_CLASS_LEAVE_OUT=bind_ports
there, on a machine other graders share).
"""

import contextlib
import glob
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from nbgrader.api import Gradebook

from grader.gradebook.results import unseal

from grader.exercises import get_exercise
from samples.make_samples import solution_answers
from grader.isolation.slot_uids import SCAN, SlotUids
from tests import accounts, kernel_keys
from tests.helpers import ROOT, needs_bwrap
from tests.servers import kill_all
from tests.graded_class import (
    A,
    HOSTILE,
    forged_result,
    generated_course,
    grade_args,
    notebook_with,
    pick_device_attack,
    place,
)

GRADER = os.path.join(ROOT, "grader")
EXTRA_ARGS = os.environ.get("HOSTILE_CLASS_GRADE_ARGS", "").split()
HONEST = ["ada", "bo"]
CONTROL = "control"
# HOSTILE_CLASS_LEAVE_OUT=bind_ports: for an unsandboxed try on a shared machine, where that attack would bind
# the ports of every other grader of the same user
LEAVE_OUT = set(os.environ.get("HOSTILE_CLASS_LEAVE_OUT", "").split(",")) | {"control"}
ATTACKS = sorted(
    name
    for name in (os.path.basename(p)[:-3] for p in glob.glob(os.path.join(HOSTILE, "*.py")))
    if name not in LEAVE_OUT
)
# attacks the sandbox refuses at the attempt (the check message says `refused`); the others (a process left
# behind) start, and are judged by their effect: nothing left running, nothing forged trusted
REFUSED = {
    "read_solutions",
    "read_hidden",
    "read_classmate",
    "read_ssh",
    "write_config",
    "write_gradebook",
    "write_journal",
    "write_graded",
    "network",
    "raise_hidden",
    "forge_result",
    "flood_result",
    "reach_instructor",
    "plant_root",
    "kernel_keys",
}
LEFT_BEHIND = {"leftover", "graded_after", "bind_ports"}
# tests/hostile/limits/: a fork bomb in pick_device's ranks (its own later checks may fail for it: it gains nothing)
LIMIT_ATTACKS = [name for name in ["fork_bomb"] if name not in LEAVE_OUT]
INSTRUCTOR = "hostprof"  # the non-root instructor account the class is graded by, the second time
MARKER = "HOSTILE-LEFTOVER"
EXERCISE = get_exercise(A)
MAX = EXERCISE.max_score
HONEST_PART = sum(c.points for c in EXERCISE.checks if c.task in ("pick_backend", "make_dataloader"))
HIDDEN_DATALOADER = sum(c.points for c in EXERCISE.checks if c.task == "make_dataloader" and c.hidden)
# a line of train_one_epoch's answer: in the solution and in ada's notebook, not in the release nor any attacker's
ANSWER_LINE = "totals[0] += loss.detach().double() * len(inputs)"
KEY_SECRET = "hostile-class-kernel-key-secret-5b9e"  # the payload of a key the grading account plants
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- hostile-class-fake-key-1f2e3d -----END OPENSSH PRIVATE KEY-----"

pytestmark = [
    needs_bwrap,
    pytest.mark.timeout(1800),
]


class Listener:
    """A TCP server on 127.0.0.1 standing in for the hub and PostgreSQL: it records who connects."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.received.append(conn.recv(4096) or b"(connected)")
                except OSError:
                    self.received.append(b"(connected)")

    def close(self):
        self.sock.close()


def _answers(name: str, values: dict) -> dict:
    good = solution_answers()
    answers = {
        "pick_backend_answer": good["pick_backend_answer"],
        "pick_device_answer": pick_device_attack(name, values),
        "make_dataloader_answer": good["make_dataloader_answer"],
    }
    if name == "raise_hidden":  # in the hidden phase too: a hidden check calls make_dataloader with 3 ranks
        answers["make_dataloader_answer"] = good["make_dataloader_answer"].replace(
            "    sampler = ",
            "    if world_size == 3:\n        import inspect\n"
            "        import grader.exercises.ddp_basics.hidden_training as _hidden\n"
            "        raise RuntimeError(inspect.getsource(_hidden))\n    sampler = ",
            1,
        )
    return answers


def _instructor_files(root: str) -> dict[str, str]:
    """sha256 of every file of the course but what grading writes (graded/, autograded/, the gradebook)."""
    written = ("graded", "autograded", "gradebook.db", ".gradebook.lock")
    digests = {}
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        if rel.split(os.sep)[0] in written:
            continue
        for name in files:
            path = os.path.join(folder, name)
            if os.path.relpath(path, root).split(os.sep)[0] in written:
                continue
            with open(path, "rb") as f:
                digests[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return digests


def _left_running() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and MARKER in (p.info["cmdline"] or []):
            found.append(p)
    return found


def _grade(root: str, home: str, account: str | None, python: str) -> str:
    args = grade_args(root, *EXTRA_ARGS, python=python)
    if account is None:
        env = dict(os.environ, HOME=home)
        env.pop("XDG_STATE_HOME", None)  # the results key lives in this HOME
        proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    else:  # an ordinary instructor account: its own environment, nothing of root's
        env = [
            f"HOME={home}",
            f"PATH={os.path.dirname(python)}:/usr/bin:/bin",
            f"GRADER_PROCESS_MEMORY={2 << 30}",  # no cgroup here: two jobs fit in memory at 2 GiB (memory_fit.py)
            *(f"{k}={v}" for k, v in os.environ.items() if k.startswith("GRADER_")),
        ]
        proc = subprocess.run(
            ["runuser", "-u", account, "--", "env", "-i", *env, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1500,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _victim(account: str | None) -> subprocess.Popen:
    """A process of the grading account, for reach_instructor to signal, trace and read."""
    return subprocess.Popen(["runuser", "-u", account, "--", "sleep", "3000"] if account else ["sleep", "3000"])


@contextlib.contextmanager
def _instructor(mode: str, base):
    """(account or None for root, its home, its python): root grades with this venv; "non-root" with a fresh account
    made here (tests/accounts.py), its course, key and Python in its private home."""
    if mode == "root":
        yield None, str(base / "home"), sys.executable
        return
    if accounts.missing():
        pytest.skip(accounts.missing())
    with accounts.accounts([INSTRUCTOR]):
        home = accounts.home(INSTRUCTOR)
        yield INSTRUCTOR, home, accounts.instructor_python(os.path.join(home, "env"))


@pytest.fixture(scope="module", params=["root", "non-root"])
def graded(tmp_path_factory, request):
    base = tmp_path_factory.mktemp("hostile")
    with _instructor(request.param, base) as (account, home, python):
        os.makedirs(os.path.join(home, ".ssh"), exist_ok=True)
        with open(os.path.join(home, ".ssh", "id_ed25519"), "w") as f:
            f.write(SSH_KEY)
        os.chmod(os.path.join(home, ".ssh", "id_ed25519"), 0o600)  # the instructor's alone
        course = generated_course(os.path.join(home if account else str(base), "course"))
        listener, victim = Listener(), _victim(account)
        planted = kernel_keys.plant(account, KEY_SECRET)  # in the grading account's own user keyring
        values = {
            "course": course.root,
            "repo": ROOT,
            "grader": GRADER,
            "home": home,
            "port": listener.port,
            "victim": victim.pid if not account else _child_pid(victim),
            "planted": planted,
        }
        good = solution_answers()
        for student in HONEST:
            place(course, student, notebook_with(good))
        place(course, CONTROL, notebook_with(_answers("control", values)))
        for name in ATTACKS + LIMIT_ATTACKS:
            place(course, name, notebook_with(_answers(name, dict(values, forged=repr(forged_result(name))))))
        if account:
            subprocess.run(["chown", "-R", f"{account}:{account}", home], check=True, timeout=60)
        before = _instructor_files(course.root)
        keys_before = _keys_held(account)
        try:
            first = _grade(course.root, home, account, python)
            left_after_first = [p.info["cmdline"] for p in psutil.wait_procs(_left_running(), timeout=10)[1]]
            second = _grade(course.root, home, account, python)
            left_after_second = [p.info["cmdline"] for p in psutil.wait_procs(_left_running(), timeout=10)[1]]
            victim_alive = victim.poll() is None
            keys_after = _keys_held(account)
        finally:
            kernel_keys.invalidate(account, planted)
            kill_all(_left_running())  # only ever this class's processes: they carry the marker
            listener.close()
            victim.kill()
            victim.wait(timeout=10)
        yield {
            "course": course,
            "home": home,
            "before": before,
            "first": first,
            "second": second,
            "left": left_after_first + left_after_second,
            "received": listener.received,
            "victim_alive": victim_alive,
            "keys": (keys_before, keys_after),
            "mode": request.param,
        }


def _keys_held(account: str | None) -> dict[str, int]:
    return kernel_keys.held_by_class(account, range(SlotUids.start(), SlotUids.start() + SCAN))


def _child_pid(runner: subprocess.Popen) -> int:
    """The pid of the `sleep` that runuser started (runuser waits for it): the account's own process."""
    for _ in range(100):
        children = psutil.Process(runner.pid).children()
        if children:
            return children[0].pid
        time.sleep(0.05)
    raise AssertionError("runuser started no sleep")


def _results(course) -> dict[str, dict]:
    results = {}
    for path in glob.glob(os.path.join(course.results_dir(A), "*.json")):
        with open(path) as f:
            results[os.path.basename(path)[:-5]] = json.load(f)
    return results


def _gradebook(course) -> dict[str, dict]:
    with Gradebook(course.db_url) as gb:
        return {
            s.student.id: {
                "score": s.score,
                "flagged": any(n.flagged for n in s.notebooks),
                "manual": [g.manual_score for n in s.notebooks for g in n.grades if g.manual_score is not None],
            }
            for s in gb.find_assignment(A).submissions
        }


def _expected(student: str) -> float:
    if student in HONEST:
        return MAX
    return HONEST_PART - (HIDDEN_DATALOADER if student == "raise_hidden" else 0)


def test_honest_classmates_get_exactly_full_marks_and_are_not_flagged(graded):
    """Every check passed, as in a class without attackers: the bomb, the forgers and the flood beside them took
    nothing from them."""
    rows = _gradebook(graded["course"])
    assert {s: (rows[s]["score"], rows[s]["flagged"]) for s in HONEST} == {s: (MAX, False) for s in HONEST}, graded[
        "first"
    ]
    every_check = [(c.name, True, c.points) for c in EXERCISE.checks]
    for student in HONEST:
        checks = _results(graded["course"])[student]["report"]["checks"]
        assert [(c["name"], c["passed"], c["points"]) for c in checks] == every_check, graded["first"]


def test_the_instructors_own_process_is_out_of_reach(graded):
    assert graded["victim_alive"], "student code killed a process of the grading account"


def test_each_attacker_gains_nothing(graded):
    rows = _gradebook(graded["course"])
    assert HONEST_PART > 0 and rows[CONTROL]["score"] == HONEST_PART, graded["first"]
    gained = {s: rows[s]["score"] for s in ATTACKS if rows[s]["score"] != _expected(s)}
    assert not gained, f"attackers whose score is not their honest part's ({HONEST_PART}): {gained}"
    gained = {s: rows[s]["score"] for s in LIMIT_ATTACKS if rows[s]["score"] > HONEST_PART}
    assert not gained, f"attackers who got more than their honest part ({HONEST_PART}): {gained}"


def test_the_instructors_files_and_gradebook_rows_are_the_graders(graded):
    course = graded["course"]
    after = _instructor_files(course.root)
    changed = sorted(n for n in set(after) | set(graded["before"]) if after.get(n) != graded["before"].get(n))
    assert not changed, f"instructor files changed by the class: {changed}"
    assert not os.path.exists(course.sqlite_gradebook + "-journal"), "a planted journal was left for SQLite"
    rows = _gradebook(course)
    assert set(rows) == set(HONEST) | {CONTROL} | set(ATTACKS) | set(LIMIT_ATTACKS)
    assert not {s: r["manual"] for s, r in rows.items() if r["manual"]}, "manual scores written by student code"
    assert not os.path.exists("/tmp/forged-gradebook.db")


def test_nothing_of_the_class_is_left_running(graded):
    assert not graded["left"], f"left running after grading: {graded['left']}"


def test_no_job_leaves_a_kernel_key(graded):
    """Kernel keys are in no namespace: after the run no slot uid (as root) holds a key more than before, and the
    grading account holds none an attacker made (the seccomp filter keeps every job from adding, linking or reading
    one)."""
    before, after = graded["keys"]
    grown = {uid: n for uid, n in after.items() if n > before.get(uid, 0)}
    assert not grown, f"kernel keys the class left (slot uid or key: how many): {grown}"


def test_the_network_is_unreachable(graded):
    assert not graded["received"], f"student code reached the test's server: {graded['received'][:3]}"


def test_each_attempt_is_recorded_in_the_attackers_report(graded):
    results = _results(graded["course"])
    missing, succeeded = {}, {}
    for name in ATTACKS:
        message = " ".join(c["message"] for c in results[name]["report"]["checks"] if c["task"] == "pick_device")
        if f"ATTACK {name}: " not in message:
            missing[name] = message[:300]
        elif name in REFUSED and f"ATTACK {name}: refused" not in message:
            succeeded[name] = message[:300]
    assert not missing, f"attempts not in the report: {missing}"
    assert not succeeded, f"attempts that got something inside the ranks: {succeeded}"


def test_no_secret_reaches_a_message_or_the_feedback(graded):
    course = graded["course"]
    with open(os.path.join(GRADER, "exercises", "ddp_basics", "hidden_training.py")) as f:
        hidden = [line.strip() for line in f if len(line.strip()) > 30 and not line.startswith(("from", "import"))]
    with open(os.path.join(course.root, "solutions", A, f"{A}.ipynb")) as f:
        assert ANSWER_LINE in f.read()
    leaks = {}
    for name in ATTACKS:
        texts = [c["message"] for c in _results(course)[name]["report"]["checks"] if not c["hidden"]]
        autograded = os.path.join(course.root, "autograded", name, A, f"{A}.ipynb")
        if os.path.exists(autograded):
            with open(autograded) as f:
                texts.append(f.read())
        text = "\n".join(texts)
        found = [s for s in hidden + [SSH_KEY, KEY_SECRET, ANSWER_LINE] if s in text]
        if found:
            leaks[name] = found[:2]
    assert not leaks, f"secrets in an attacker's messages or feedback: {leaks}"


def test_a_rerun_trusts_nothing_forged_and_regrades_nothing(graded):
    course = graded["course"]
    results = _results(course)
    with open(os.path.join(graded["home"], ".local", "state", "ddp-grader", "results.key"), "rb") as f:
        key = f.read().strip()
    with open(os.path.join(course.results_dir(A), "graded_after.json"), "rb") as f:
        sealed, forged = unseal(f.read(), key)
    assert sealed is not None and not forged, "graded_after.json is not the grader's"
    assert sealed["report"]["score"] == _expected("graded_after")
    assert {s: r["report"]["score"] for s, r in results.items() if s not in LIMIT_ATTACKS} == {
        s: _expected(s) for s in HONEST + [CONTROL] + ATTACKS
    }
    assert graded["first"] == graded["second"], "the re-run's grade table differs"
