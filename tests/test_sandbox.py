"""The grading sandbox (grader/isolation/sandbox.py), seen from inside a graded submission's rank.

A class of 02_ddp_basics is graded with `python -m grader grade` (sandboxed, its default) as the instructor runs
it: ada answers with the solution, probe with the solution except `pick_device`, which looks around from inside
its rank (in every rank of that task's checks) and raises `PROBE {what it saw}`, so what it saw comes back in its
own public check message. The test's parent holds what the probe must not get: a TCP server on the host's
127.0.0.1, a secret in its environment, the course (solutions, a classmate's submission, the gradebook), its home.
Then, without bwrap on PATH, `grade` stops with exit 2 and the install line; with --no-sandbox it grades and the
table, the stored result and the class report say the class was graded unsandboxed.

Every other exercise's solution is graded the same way, sandboxed, with full marks expected, by tests/test_selfcheck.py
(make selfcheck's pass through make grade, run for every exercise; it was graded here a second time).
"""

import glob
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from grader.exercises import get_exercise
from grader.gradebook import roundtrip
from grader.isolation.slot_uids import SlotUids
from grader.isolation.nursery_client import use_nursery
from samples.make_samples import solution_answers
from tests.helpers import ROOT, live_with_marker, probe_report, needs_bwrap
from tests.graded_class import A, notebook_with, place, run_grade

MAX = get_exercise(A).max_score
SECRET = "s3cret-" + uuid.uuid4().hex
MARKER = "SANDBOX-PROBE-LEFTOVER-" + uuid.uuid4().hex[:8]
HOME = os.path.expanduser("~")

pytestmark = [
    needs_bwrap,
    pytest.mark.timeout(1200),
]

PROBE = """
def _probe():
    import json, os, socket, sys
    seen = {"uid": os.getuid(), "uid_map": [l.split() for l in open("/proc/self/uid_map")]}
    try:
        open("/proc/1/environ", "rb").read()  # the sandbox's PID 1 (bwrap) is root's: readable only as root
        seen["root_file"] = "read"
    except OSError as exc:
        seen["root_file"] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", $port), timeout=3).close()
        seen["network"] = "connected"
    except OSError as exc:
        seen["network"] = type(exc).__name__
    seen["visible"] = [p for p in $forbidden if os.path.exists(p)]
    seen["home"] = sorted(os.listdir($home)) if os.path.isdir($home) else []
    writable = []
    for folder in $writes:
        try:
            with open(os.path.join(os.path.expanduser(folder), "probe-" + str(os.getpid())), "w") as f:
                f.write("x")
            writable.append(folder)
        except OSError:
            pass
    seen["writable"] = writable
    seen["secret_in_env"] = any($secret in v for v in os.environ.values())
    seen["hidden_loaded"] = sorted(m for m in sys.modules if ".hidden_" in m)
    import grader, glob
    seen["hidden_bytes"] = sum(os.path.getsize(p) for p in glob.glob(os.path.join(
        os.path.dirname(grader.__file__), "exercises", "*", "hidden_*.py")))
    pid = os.fork()
    if pid == 0:  # a double fork into a session of its own: must die with the sandbox
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", $marker])
        os._exit(0)
    os.waitpid(pid, 0)
    return seen


def pick_device(local_rank: int) -> torch.device:
    raise RuntimeError("PROBE " + json.dumps(_probe(), separators=(",", ":")))
"""


def _probe_answers(values: dict) -> dict:
    from string import Template

    answers = solution_answers()
    answers["pick_device_answer"] = "import json\n" + Template(PROBE).substitute(
        {k: repr(v) for k, v in values.items()}
    )
    return answers


def _results(root: str) -> dict[str, dict]:
    out = {}
    for path in glob.glob(os.path.join(root, "graded", A, "*.json")):
        with open(path) as f:
            out[os.path.basename(path)[:-5]] = json.load(f)
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("course"))
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    ada = place(course, "ada", notebook_with(solution_answers()))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    forbidden = [
        root,
        os.path.join(ROOT, "solutions"),
        os.path.join(ROOT, ".git"),
        ada,
        os.path.join(root, "gradebook.db"),
        os.path.join(ROOT, "samples"),
        os.path.join(HOME, ".ssh"),
    ]
    writes = [
        "/tmp",
        "~",
        HOME,
        os.path.join(ROOT, "grader"),
        os.path.dirname(sys.executable),
        "/grading",
        "/usr",
        "/",
    ]  # "~": the sandbox's own HOME
    place(
        course,
        "probe",
        notebook_with(
            _probe_answers(
                {
                    "port": listener.getsockname()[1],
                    "forbidden": forbidden,
                    "home": HOME,
                    "writes": writes,
                    "secret": SECRET,
                    "marker": MARKER,
                }
            )
        ),
    )
    env = dict(os.environ, SANDBOX_PROBE_SECRET=SECRET, PGPASSWORD=SECRET)
    try:
        proc = run_grade(root, env=env)
        try:
            listener.accept()
            connected = True
        except BlockingIOError:
            connected = False
    finally:
        listener.close()
    yield {"root": root, "proc": proc, "results": _results(root), "connected": connected}
    for leftover in live_with_marker(MARKER):  # a failed test must not leave the probe's child behind
        leftover.kill()


def test_the_solution_gets_full_marks_sandboxed(graded):
    assert graded["proc"].returncode == 0, graded["proc"].stderr[-3000:]
    ada = graded["results"]["ada"]
    assert ada["report"]["score"] == MAX, [c for c in ada["report"]["checks"] if not c["passed"]]
    assert ada["sandboxed"] is True
    assert "UNSANDBOXED" not in graded["proc"].stdout


def test_a_rank_runs_as_an_unprivileged_user_not_root_in_a_namespace(graded):
    seen = probe_report(graded["results"]["probe"])
    assert seen["uid"] != 0
    assert seen["root_file"] == "PermissionError", seen
    if os.geteuid() == 0:  # as root, the job's own uid (slot_uids.py): no user namespace maps it onto root
        # (a nursery's job maps its one uid into a namespace of its own: the host's uid of its job too)
        host = [
            int(outside) + seen["uid"] - int(inside)
            for inside, outside, count in seen["uid_map"]
            if int(inside) <= seen["uid"] < int(inside) + int(count)
        ]
        assert len(host) == 1 and SlotUids.start() <= host[0] < SlotUids.start() + 4096, seen
        if not use_nursery():
            assert seen["uid_map"] == [["0", "0", "4294967295"]], seen


def test_a_rank_has_no_network(graded):
    seen = probe_report(graded["results"]["probe"])
    assert seen["network"] in ("ConnectionRefusedError", "OSError", "TimeoutError"), seen
    assert not graded["connected"]


def test_a_rank_sees_nothing_of_the_course_nor_the_home(graded):
    seen = probe_report(graded["results"]["probe"])
    assert seen["visible"] == [], seen
    python_under_home = os.path.realpath(sys.base_prefix).startswith(os.path.realpath(HOME) + os.sep)
    bound = {os.path.relpath(os.path.realpath(sys.base_prefix), HOME).split(os.sep)[0]} if python_under_home else set()
    assert set(seen["home"]) <= bound, seen["home"]  # only the Python prefix bound back, nothing else of ~


def test_a_rank_writes_only_its_private_tmp_and_home(graded):
    seen = probe_report(graded["results"]["probe"])
    assert seen["writable"] == ["/tmp", "~"], seen
    assert not glob.glob(os.path.join(ROOT, "grader", "probe-*")) and not glob.glob("/tmp/probe-*")


def test_a_rank_gets_none_of_the_graders_environment(graded):
    seen = probe_report(graded["results"]["probe"])
    assert seen["secret_in_env"] is False


def test_public_checks_never_see_hidden_ones(graded):
    seen = probe_report(graded["results"]["probe"])
    assert seen["hidden_loaded"] == [] and seen["hidden_bytes"] == 0, seen
    # and the hidden checks still ran, in their own sandbox: ada has every hidden point
    ada = graded["results"]["ada"]["report"]["checks"]
    assert [c["name"] for c in ada] == [c.name for c in get_exercise(A).checks]
    assert all(c["passed"] for c in ada if c["hidden"])


def test_a_double_forked_child_is_gone_after_grading(graded):
    deadline = time.monotonic() + 10  # SIGKILL is in flight when grade returns; a zombie does not count
    while live_with_marker(MARKER) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_with_marker(MARKER) == []


def test_without_bwrap_grade_stops_with_the_install_line(tmp_path):
    root = str(tmp_path)
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    place(course, "ada", notebook_with(solution_answers()))
    bin_dir = tmp_path / "bin"  # the venv's python and nothing else on PATH
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    proc = run_grade(root, env=dict(os.environ, PATH=str(bin_dir)))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install bubblewrap" in lines[0] and "--no-sandbox" in lines[0], proc.stderr
    assert not os.path.exists(os.path.join(root, "graded"))


def test_no_sandbox_grades_and_says_so(tmp_path):
    root = str(tmp_path)
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    place(course, "ada", notebook_with(solution_answers()))
    proc = run_grade(root, "--no-sandbox")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith("graded UNSANDBOXED")
    ada = _results(root)["ada"]
    assert ada["sandboxed"] is False and ada["report"]["score"] == MAX
    report = subprocess.run(
        [sys.executable, "-m", "grader", "report", A, "--root", root],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert report.returncode == 0, report.stderr
    with open(os.path.join(root, "reports", f"{A}.md")) as f:
        assert "Graded unsandboxed" in f.read()
