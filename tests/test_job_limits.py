"""Limits per job, not per user: a fork bomb, a memory hog or a spinner in one job takes no point from a classmate
graded beside it, and is reported to its author naming the limit it ran into.

A class of 02_ddp_basics is graded twice (the default nurseries, then GRADER_NURSERY=0, two jobs at once): ada and
bo answer everything; four classmates answer only pick_device, which attacks from inside its ranks: fork_bomb spawns processes until refused, memory_hog fills /dev/shm, /tmp and HOME and then
anonymous memory, spinner keeps 100 processes spinning (tests/hostile/limits/), forge_result forges a result on the
channel (tests/hostile/). Asserted: ada and bo pass every check (full marks, what a calm class gets) and are
unflagged, the attackers score 0 and are flagged naming their limit, the class finishes, and nothing of it is left
running, nor any cgroup of it. The job's memory bound is set to 2 GiB here (GRADER_JOB_MEMORY) so that the hog stays
small on a shared machine. How much longer a class takes beside a spinner is benchmarks/bench_spinner.py's.
"""

import glob
import json
import os
import resource
import subprocess
import sys
import time

import psutil
import pytest

from grader.exercises import get_exercise
from grader.isolation.cpu_bound import CPU_PERIOD_US, THROTTLED_MIN_PERIODS, job_cpus
from grader.isolation.job_limits import OFF_ENV, PROCESSES_PER_JOB, JobLimits
from samples.make_samples import solution_answers
from tests.helpers import ROOT, needs_bwrap
from tests.graded_class import A, attacker_notebook, generated_course, grade_args, notebook_with, place

HONEST = ("ada", "bo")
MEMORY = 2 << 30
pytestmark = [needs_bwrap, pytest.mark.timeout(1800)]


def _grade(
    base: str, attackers: tuple[str, ...], nursery: str, cgroups: bool = True, env: dict | None = None
) -> tuple[dict, str]:
    course = generated_course(base)
    for student in HONEST:
        place(course, student, notebook_with(solution_answers()))
    for name in attackers:
        place(course, name, attacker_notebook(name, course))
    env = dict(os.environ, HOME=base, GRADER_NURSERY=nursery, GRADER_JOB_MEMORY=str(MEMORY), **(env or {}))
    if not cgroups:
        env[OFF_ENV] = "0"
    env.pop("XDG_STATE_HOME", None)
    with subprocess.Popen(
        grade_args(course.root),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=1500)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert done.returncode == 0, done.stdout + done.stderr
    # this run's cgroups are named after its pid (job_limits.py); other tests' runs may be grading meanwhile
    assert not glob.glob(f"/sys/fs/cgroup/**/ddp-grader-{proc.pid}", recursive=True), "this run left its cgroups"
    results = {}
    for student in HONEST + attackers:
        path = os.path.join(course.results_dir(A), f"{student}.json")
        if not os.path.exists(path):  # its grading did not finish (the hog's worker itself killed): the grade
            rows = [line for line in done.stdout.splitlines() if line.startswith(student + " ")]  # table's row
            results[student] = {"report": {"score": 0, "checks": []}, "flags": rows}
            continue
        with open(path) as f:
            results[student] = json.load(f)
    return results, done.stdout + done.stderr


def _checks(result: dict) -> list:
    return [(c["name"], c["passed"], c["points"]) for c in result["report"]["checks"]]


def _left() -> list:
    return [
        p.info
        for p in psutil.process_iter(["pid", "cmdline", "uids", "status"])
        if (p.info["cmdline"] == ["sleep", "30"] or "HOSTILE-SPINNER" in (p.info["cmdline"] or []))
        and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.skipif(bool(JobLimits.probe()), reason=JobLimits.probe() or "-")
@pytest.mark.parametrize("nursery", ["1", "0"])
def test_a_bomb_and_a_hog_take_nothing_from_classmates(tmp_path, nursery):
    attackers = ("fork_bomb", "memory_hog", "spinner", "forge_result")
    stormy, output = _grade(str(tmp_path / "stormy"), attackers, nursery)
    every_check = [(c.name, True, c.points) for c in get_exercise(A).checks]  # what a calm class gets
    for student in HONEST:
        assert _checks(stormy[student]) == every_check and stormy[student]["report"]["score"] == 44, output
        assert not stormy[student]["flags"], stormy[student]["flags"]
    assert {s: stormy[s]["report"]["score"] for s in attackers} == {s: 0 for s in attackers}, output
    assert any("pids.max" in f for f in stormy["fork_bomb"]["flags"]), stormy["fork_bomb"]["flags"]
    assert any("memory" in f and "limit" in f for f in stormy["memory_hog"]["flags"]), stormy["memory_hog"]["flags"]
    assert any("limit on CPU" in f for f in stormy["spinner"]["flags"]), stormy["spinner"]["flags"]
    assert not psutil.wait_procs([psutil.Process(p["pid"]) for p in _left()], timeout=10)[1], _left()


@pytest.mark.skipif(os.geteuid() != 0, reason="as root; a non-root account's class is tests/test_hostile_class.py's")
@pytest.mark.parametrize("nursery", ["1", "0"])
def test_without_cgroups_a_bomb_takes_nothing_from_classmates(tmp_path, nursery):
    """No cgroup (GRADER_JOB_CGROUPS=0, as on a machine without any): said once at start, and each job still has a
    budget of processes of its own (its own uid, RLIMIT_NPROC), so a fork bomb stops there and its classmates, graded
    beside it, get every check (what a calm class gets: every check passed, as the test above shows). The bomb's
    own message (the first rank's to fail) tells how many it spawned before the kernel refused. RLIMIT_DATA is 2 GiB
    here (GRADER_PROCESS_MEMORY), so that two jobs fit in this host's memory (test_unbounded_jobs.py)."""
    extra = {"GRADER_PROCESS_MEMORY": str(2 << 30)}
    stormy, output = _grade(str(tmp_path / "stormy"), ("fork_bomb",), nursery, cgroups=False, env=extra)
    every_check = [(c.name, True, c.points) for c in get_exercise(A).checks]
    for student in HONEST:
        assert _checks(stormy[student]) == every_check and not stormy[student]["flags"], output
    bomb = " ".join(c["message"] for c in stormy["fork_bomb"]["report"]["checks"] if c["task"] == "pick_device")
    spawned = int(bomb.split("spawned ")[1].split()[0]) if "spawned " in bomb else None
    assert spawned is not None and spawned < PROCESSES_PER_JOB and "temporarily unavailable" in bomb, bomb
    notices = [line for line in output.splitlines() if "no limit per job here" in line]
    assert len(notices) == 1 and f"{OFF_ENV}=0" in notices[0] and "its own uid" in notices[0], output
    assert "--jobs" not in notices[0], notices[0]  # two jobs of 2 GiB processes fit: graded side by side
    assert not psutil.wait_procs([psutil.Process(p["pid"]) for p in _left()], timeout=10)[1], _left()


@pytest.mark.skipif(bool(JobLimits.probe()), reason=JobLimits.probe() or "-")
def test_a_killed_runs_cgroups_are_removed_by_the_next_run():
    """A grading run killed outright (no `finally` runs) leaves its empty groups; the next run removes them."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    limits = JobLimits.here()
    try:
        stale = [os.path.join(os.path.dirname(base), f"ddp-grader-{dead.pid}") for base in set(limits.bases.values())]
    finally:
        limits.close()
    for folder in stale:
        os.mkdir(folder)
    JobLimits.here().close()
    assert not [folder for folder in stale if os.path.exists(folder)]


def _spin(group, processes: int, seconds: float) -> subprocess.Popen:
    """`processes` busy processes for `seconds`, in the group from their first instruction."""
    code = f"""import os, time
end, children = time.monotonic() + {seconds}, []
for _ in range({processes} - 1):
    pid = os.fork()
    if pid == 0:
        children = None
        break
    children.append(pid)
while time.monotonic() < end:
    pass
if children is None:
    os._exit(0)
for pid in children:
    os.waitpid(pid, 0)
"""
    return subprocess.Popen(group.join_argv([sys.executable, "-c", code]))


@pytest.mark.skipif(bool(JobLimits.probe()), reason=JobLimits.probe() or "-")
def test_a_jobs_cpu_quota_is_set_and_enforced():
    """Real processes in a real group: held to a twentieth of a CPU (reached even on this busy host), three busy
    processes are throttled by the kernel (its counters), use no more than that quota, and the job is flagged naming
    the quota."""
    limits = JobLimits.here(0.05, jobs=1)
    group = limits.new_group()
    try:
        if "cpu" not in limits.bases:
            pytest.skip("no cpu controller here")
        quota = _read(group.folders["cpu"], "cpu.cfs_quota_us" if limits.version == 1 else "cpu.max").split()[0]
        assert quota == "5000", quota
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        _spin(group, 3, 14.0).wait(timeout=60)
        wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
        stat = group.cpu_stat()
        assert stat["nr_throttled"] >= THROTTLED_MIN_PERIODS, stat
        assert any("cpu.cfs_quota_us" in f or "cpu.max" in f for f in group.exceeded()), (stat, group.exceeded())
        used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        assert used < 0.05 * wall * 1.2 + 0.3, (used, wall)
    finally:
        group.close()
        limits.close()


@pytest.mark.skipif(bool(JobLimits.probe()), reason=JobLimits.probe() or "-")
def test_as_many_busy_processes_as_ranks_are_never_flagged_and_a_spinner_is():
    """At the quota an exercise's widest run gets (what its ranks compute on, a CPU for its worker), and weighing as
    its jobs would: as many busy processes as its ranks and worker are not flagged, a spinner's many are, looked at
    once a second as the pool does, whatever CPU this busy host had for them (the quota itself, more than the host's
    CPUs, is never reached)."""
    ranks = 3
    spinners = max(20, 3 * round(job_cpus(ranks)))
    limits = JobLimits.here(job_cpus(ranks), jobs=2)
    groups = [limits.new_group(), limits.new_group()]
    try:
        if "cpu" not in limits.bases:
            pytest.skip("no cpu controller here")
        ranks_like, spinner = groups
        v1 = limits.version == 1
        quota = _read(ranks_like.folders["cpu"], "cpu.cfs_quota_us" if v1 else "cpu.max").split()[0]
        assert int(quota) == (max(os.cpu_count(), ranks) + 1) * CPU_PERIOD_US == job_cpus(ranks) * CPU_PERIOD_US, quota
        weight = _read(limits.bases["cpu"], "cpu.shares" if v1 else "cpu.weight")
        assert int(weight) == min(262144 if v1 else 10000, (1024 if v1 else 100) * 2 * round(job_cpus(ranks))), weight
        procs = [_spin(ranks_like, ranks + 1, 8.0), _spin(spinner, spinners, 8.0)]
        while any(p.poll() is None for p in procs):
            time.sleep(1.0)
            ranks_like.sample()
            spinner.sample()
        assert not ranks_like.exceeded(), (ranks_like.demand.__dict__, ranks_like.exceeded())
        assert any("wanted a CPU at once" in f for f in spinner.exceeded()), spinner.demand.__dict__
    finally:
        for group in groups:
            group.close()
        limits.close()


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as f:
        return f.read().strip()
