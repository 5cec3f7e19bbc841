"""The grading worker's result channel is private, as root and as an ordinary instructor account.

A class of 02_ddp_basics: ada answers everything, and three students answer nothing but pick_device, which attacks
from inside its ranks (tests/hostile/forge_result.py, flood_result.py): the forger reads the job's token from
the worker's memory (/proc/PID/mem) and writes a full-marks result into every descriptor of the job that may be the
channel, taken with pidfd_getfd (the resource tracker held it as fd 1); the flooder writes 256 MiB without a newline
into them; a third (tests/hostile/kernel_keys.py) adds, links and reads kernel keys, one the non-root account planted
among them. Graded in every sandboxed mode (nurseries; GRADER_NURSERY=0, a bubblewrap sandbox per job), as root and as
a fresh non-root account: ada gets full marks, the attackers 0, each attack is refused inside the rank, and no slot
uid (nor the account) holds a kernel key it did not hold before. The parent's own defence (a length limit, one job
never blocking the others) is shown with a worker that floods its real channel.
"""

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from grader.exercises import get_exercise
from grader.isolation.worker_pool import RESULT_LIMIT, Job, Workers, run_pool
from samples.make_samples import solution_answers
from grader.isolation.slot_uids import SCAN, SlotUids
from tests import accounts, kernel_keys
from tests.helpers import ROOT, needs_bwrap
from tests.graded_class import A, attacker_notebook, generated_course, grade_args, notebook_with, place, run_grade

MAX = get_exercise(A).max_score
ATTACKERS = ("forge_result", "flood_result", "kernel_keys")
INSTRUCTOR = "chanprof"
KEY_SECRET = "result-channel-kernel-key-secret-3e7a"
pytestmark = [pytest.mark.timeout(1500)]


def _course(root: str, planted: int = 0):
    course = generated_course(root)
    place(course, "ada", notebook_with(solution_answers()))
    for name in ATTACKERS:
        place(course, name, attacker_notebook(name, course, planted))
    return course


def _keys_held(account: str | None = None) -> dict[str, int]:
    return kernel_keys.held_by_class(account, range(SlotUids.start(), SlotUids.start() + SCAN))


def _scores(course) -> dict:
    found = {}
    for student in ("ada", *ATTACKERS):
        path = os.path.join(course.results_dir(A), f"{student}.json")
        if not os.path.exists(path):  # never graded (the grader's own run of it did not finish)
            found[student] = (0, "not graded")
            continue
        with open(path) as f:
            report = json.load(f)["report"]
        attempt = " ".join(c["message"] for c in report["checks"] if c["task"] == "pick_device")
        found[student] = (report["score"], "refused" if "refused:" in attempt else attempt[:300])
    return found


EXPECTED = {"ada": (MAX, "refused"), **{name: (0, "refused") for name in ATTACKERS}}


@needs_bwrap
@pytest.mark.parametrize("nursery", ["1", "0"])
def test_no_forged_result_as_root(tmp_path, nursery):
    course = _course(str(tmp_path / "course"))
    env = dict(os.environ, HOME=str(tmp_path), GRADER_NURSERY=nursery)
    env.pop("XDG_STATE_HOME", None)
    keys_before = _keys_held()
    done = run_grade(course.root, env=env, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _keys_held() == keys_before, "a slot uid holds a kernel key it did not hold before the run"
    scores = _scores(course)
    scores["ada"] = (scores["ada"][0], "refused")  # ada attacks nothing
    assert scores == EXPECTED, done.stdout


@needs_bwrap
@pytest.mark.skipif(bool(accounts.missing()), reason=accounts.missing() or "-")
@pytest.mark.parametrize("nursery", ["", "0"])
def test_no_forged_result_as_a_non_root_instructor(tmp_path, nursery):
    """As an account that is not root (its own Python, the course in its home); "" is the default mode."""
    with accounts.accounts([INSTRUCTOR]):
        home = accounts.home(INSTRUCTOR)
        python = accounts.instructor_python(os.path.join(home, "env"))
        planted = kernel_keys.plant(INSTRUCTOR, KEY_SECRET)  # the account's own key: no job may read it
        course = _course(os.path.join(home, "course"), planted)
        subprocess.run(["chown", "-R", f"{INSTRUCTOR}:{INSTRUCTOR}", home], check=True, timeout=60)
        keys_before = _keys_held(INSTRUCTOR)
        env = [f"HOME={home}", f"PATH={os.path.dirname(python)}:/usr/bin:/bin"]
        env += [f"GRADER_NURSERY={nursery}"] if nursery else []
        done = subprocess.run(
            ["runuser", "-u", INSTRUCTOR, "--", "env", "-i", *env, *grade_args(course.root, python=python)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        scores = _scores(course)
        keys_after = _keys_held(INSTRUCTOR)
        kernel_keys.invalidate(INSTRUCTOR, planted)
    assert keys_after == keys_before, "the account holds kernel keys it did not hold before the run"
    assert KEY_SECRET not in done.stdout + done.stderr + str(scores)
    scores["ada"] = (scores["ada"][0], "refused")
    assert scores == EXPECTED, done.stdout + done.stderr
    # no cgroup for an ordinary account here: said once, at start, in one line
    warned = [line for line in done.stderr.splitlines() if "no limit per job here" in line]
    before = done.stderr[: done.stderr.index(warned[0])].splitlines() if warned else []
    assert len(warned) == 1 and all(line.startswith("grader:") for line in before), done.stderr  # among the first


FLOODER = """
import sys, time
for line in sys.stdin:
    student, token = line.split("\\t")[0], line.split("\\t")[3]
    if student == "flood":
        chunk = b"A" * (1 << 20)
        for _ in range(256):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        time.sleep(600)
    print(token + "\\t" + '{"student": "%s", "phase": "all"}' % student, flush=True)
"""


def test_a_flooded_channel_stops_that_job_only_and_is_flagged(tmp_path):
    """A worker that writes 256 MiB without a newline: the parent keeps at most RESULT_LIMIT of it, stops that
    job and flags it, and the job beside it is not held up."""
    script = tmp_path / "worker.py"
    script.write_text(FLOODER)
    workers = Workers([])
    workers.argv = [sys.executable, str(script)]
    results, strays = {}, {}
    before = psutil.Process().memory_info().rss
    started = time.monotonic()
    run_pool(
        [Job("flood", None, "flood"), Job("calm", None, "calm")],
        workers,
        2,
        lambda job, result: results.setdefault(job.student, result) is not None,
        lambda student, why: strays.setdefault(student, why),
        lambda students: None,
        False,
        2,
        "test",
    )
    assert time.monotonic() - started < 300
    assert results == {"calm": {"student": "calm", "phase": "all"}}
    assert list(strays) == ["flood"] and "result channel" in strays["flood"], strays
    assert psutil.Process().memory_info().rss - before < 4 * RESULT_LIMIT + (64 << 20)
