"""Jobs forked from a sandbox's nursery (grader/isolation/nursery.py, nursery_job.py) are kept apart from each other and
from the nursery, seen from inside a graded submission's rank.

One class of 02_ddp_basics is graded with the nurseries on (GRADER_NURSERY=1, the default as root), two jobs at
once (that a solution gets full marks from a nursery is test_sandbox.py's and test_hostile_class.py's to show):
pa and pb answer `pick_backend` and leave the rest as released, except `pick_device`, which
looks around from inside its rank and raises `PROBE {what it saw}`. Each probe leaves marks of its own (files in /tmp and HOME, a value in a
module global, and, once per job, a double-forked, setsid child that holds 127.0.0.1:PORT and answers every
connection with its student's name) and reports what it sees of anyone else's: files, processes (by /proc, by
kill(pid, 0) over the first pids, by ptrace of PID 1), the loopback port, the hidden checks, its capabilities.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from string import Template

import pytest

from grader.exercises import get_exercise
from grader.gradebook import roundtrip
from grader.isolation.nursery_client import NURSERY_ENV
from grader.isolation.sandbox import NOBODY
from grader.isolation.slot_uids import SlotUids
from samples.make_samples import solution_answers
from tests.helpers import ROOT, live_with_marker, probe_report, needs_bwrap
from tests.graded_class import A, notebook_with, place

MARKER = "NURSERY-PROBE-" + uuid.uuid4().hex[:8]
PORT = 29517
PROBES = ("pa", "pb")

pytestmark = [
    needs_bwrap,
    pytest.mark.timeout(1200),
]

PROBE = """
def _probe():
    import ctypes, glob, json, os, socket, sys
    import grader
    me, seen = $me, {}
    seen["global_mark"] = getattr(grader, "_probe_mark", None)
    grader._probe_mark = me
    home = os.environ["HOME"]
    seen["tmp"], seen["home"] = sorted(os.listdir("/tmp")), sorted(os.listdir(home))
    seen["grading"] = sorted(os.listdir("/grading"))
    seen["submission_is_mine"] = ("probe of " + me) in open("/grading/submission.ipynb").read()
    procs = {}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            procs[pid] = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError as exc:
            procs[pid] = type(exc).__name__
    seen["procs"] = procs
    def tasks():  # every thread of every process /proc shows
        found = set()
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                found.update(int(t) for t in os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
        return found
    before = tasks()
    def alive(pid):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    seen["signalable"] = [pid for pid in range(1, 4096) if alive(pid)]
    seen["tasks"] = sorted(before | tasks())
    libc = ctypes.CDLL(None, use_errno=True)
    seen["ptrace_1"] = libc.ptrace(16, 1, None, None) == 0 or os.strerror(ctypes.get_errno())  # PTRACE_ATTACH
    seen["status"] = {k: v.strip() for k, v in (l.split(":", 1) for l in open("/proc/self/status"))
                      if k.startswith("Cap") or k == "NoNewPrivs"}
    seen["uid"], seen["uid_map"] = os.getuid(), [l.split() for l in open("/proc/self/uid_map")]
    base = os.path.dirname(grader.__file__)
    seen["hidden_bytes"] = sum(os.path.getsize(p) for p in glob.glob(f"{base}/exercises/*/hidden_*.py"))
    seen["hidden_pyc"] = glob.glob(f"{base}/exercises/*/__pycache__/hidden_*")
    seen["hidden_loaded"] = sorted(m for m in sys.modules if ".hidden_" in m)
    try:
        with socket.create_connection(("127.0.0.1", $port), timeout=5) as s:
            seen["port_peer"] = s.recv(100).decode()
    except OSError as exc:
        seen["port_peer"] = type(exc).__name__
    for folder in ("/tmp", home):
        open(os.path.join(folder, "mark-" + me), "w").write(me)
    try:
        first = os.open("/tmp/leftover-started", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        first = None
    if first is not None:  # once per job: a double fork into a session of its own, holding the port
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                code = ("import socket, sys\\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)"
                        "\\ns.bind(('127.0.0.1', $port)); s.listen()\\nwhile True:\\n c, _ = s.accept(); "
                        "c.sendall(sys.argv[1].encode()); c.close()")
                os.execv(sys.executable, [sys.executable, "-c", code, me, $marker])
            os._exit(0)
        os.waitpid(pid, 0)
    return seen


def pick_device(local_rank: int) -> torch.device:
    raise RuntimeError("PROBE " + json.dumps(_probe(), separators=(",", ":")))
"""


def _answers(me: str) -> dict:  # pick_backend answered, pick_device probes, the rest as released (fails at once)
    answers = {"pick_backend_answer": solution_answers()["pick_backend_answer"]}
    answers["pick_device_answer"] = f"import json\n# probe of {me}\n" + Template(PROBE).substitute(
        me=repr(me), port=PORT, marker=repr(MARKER)
    )
    return answers


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("course"))
    course = roundtrip.make_course(root, [A])
    roundtrip.release(course, A)
    for me in PROBES:
        place(course, me, notebook_with(_answers(me)))
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", A, "--root", root, "--jobs", "2", "--quiet", "--timeout", "20"],
        capture_output=True,
        text=True,
        timeout=1100,
        cwd=ROOT,
        env=dict(os.environ, **{NURSERY_ENV: "1"}),
    )
    results = {}
    for student in PROBES:
        with open(os.path.join(root, "graded", A, f"{student}.json")) as f:
            results[student] = json.load(f)
    leftovers = live_with_marker(MARKER)
    yield {"proc": proc, "results": results, "leftovers": [p.pid for p in leftovers]}
    for leftover in live_with_marker(MARKER):
        leftover.kill()


def test_the_probes_are_graded_sandboxed(graded):
    assert graded["proc"].returncode == 0, graded["proc"].stderr[-3000:]
    for me in PROBES:
        result = graded["results"][me]
        assert result["sandboxed"] is True and 0 < result["report"]["score"] < get_exercise(A).max_score, result


@pytest.mark.parametrize("me", PROBES)
def test_a_job_sees_only_its_own_files_and_submission(graded, me):
    seen, other = probe_report(graded["results"][me]), {p for p in PROBES if p != me}.pop()
    assert f"mark-{other}" not in seen["tmp"] + seen["home"], seen
    assert seen["grading"] == ["submission.ipynb"] and seen["submission_is_mine"], seen
    assert seen["global_mark"] in (None, me), seen  # the nursery never ran the other's code


@pytest.mark.parametrize("me", PROBES)
def test_a_job_sees_and_reaches_only_its_own_processes_and_loopback(graded, me):
    seen, other = probe_report(graded["results"][me]), {p for p in PROBES if p != me}.pop()
    cmdlines = "\n".join(seen["procs"].values())
    # its PID namespace is the job's own: not the nursery's sandbox (whose PID 1 is bwrap), not the other job's
    assert f"\x00{other}\x00{MARKER}" not in cmdlines and "bwrap" not in cmdlines and "1" in seen["procs"], seen

    assert set(seen["signalable"]) <= set(seen["tasks"]), seen  # threads answer kill(tid, 0) too
    assert seen["ptrace_1"] == os.strerror(1), seen  # EPERM: PID 1, the job's reaper, cannot be traced
    assert seen["port_peer"] in (me, "ConnectionRefusedError"), seen


@pytest.mark.parametrize("me", PROBES)
def test_a_job_has_no_capabilities_no_new_privileges_and_is_not_root(graded, me):
    seen = probe_report(graded["results"][me])
    assert all(int(v, 16) == 0 for k, v in seen["status"].items() if k.startswith("Cap")), seen["status"]
    assert seen["status"]["NoNewPrivs"] == "1"
    host = [
        int(outside) + seen["uid"] - int(inside)
        for inside, outside, count in seen["uid_map"]
        if int(inside) <= seen["uid"] < int(inside) + int(count)
    ]
    assert seen["uid"] != 0 and host and host[0] != 0, seen
    if os.geteuid() == 0:  # the job's own uid (slot_uids.py): no account's, not nobody, not its classmate's
        assert SlotUids.start() <= host[0] < SlotUids.start() + 4096 and host[0] != NOBODY, seen


@pytest.mark.skipif(os.geteuid() != 0, reason="per-job uids need root (slot_uids.py)")
def test_as_root_each_job_runs_as_a_uid_of_its_own(graded):
    hosts = set()
    for me in PROBES:
        seen = probe_report(graded["results"][me])
        hosts.update(int(outside) for inside, outside, count in seen["uid_map"] if int(inside) == seen["uid"])
    assert len(hosts) == len(PROBES) and NOBODY not in hosts, hosts


@pytest.mark.parametrize("me", PROBES)
def test_a_public_job_cannot_read_a_hidden_check(graded, me):
    seen = probe_report(graded["results"][me])
    assert seen["hidden_bytes"] == 0 and seen["hidden_pyc"] == [] and seen["hidden_loaded"] == [], seen


def test_a_jobs_double_forked_leftover_dies_with_it(graded):
    assert graded["leftovers"] == [], "a probe's leftover outlived its job and the run"
    deadline = time.monotonic() + 10  # SIGKILL may still be in flight; zombies do not count
    while live_with_marker(MARKER) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_with_marker(MARKER) == []
