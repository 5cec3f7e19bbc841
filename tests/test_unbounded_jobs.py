"""Where jobs get no cgroup (an instructor who is not root and has no delegated cgroup v2 subtree, as on this machine;
or root with GRADER_JOB_CGROUPS=0), a job's memory is bounded only per process: --jobs drops to what the host's
memory holds at that bound, the start-up line says so, and GRADER_REQUIRE_JOB_LIMITS=1 (--require-job-limits)
refuses to grade instead, before any student code runs or anything is written.

As root with GRADER_JOB_CGROUPS=0, and as a fresh non-root account (tests/accounts.py) running its own Python;
real processes, no class graded (tests/test_job_limits.py and the hostile class grade classes so).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from grader.gradebook.grading_jobs import job_limits
from grader.gradebook.course import Course
from grader.isolation import memory_fit
from grader.isolation.gpu_share import GpuShare
from grader.isolation.job_limits import OFF_ENV
from grader.isolation.sandbox import SandboxMissing
from samples.make_samples import solution_answers
from tests import accounts
from tests.graded_class import A, generated_course, grade_args, notebook_with, place
from tests.helpers import ROOT

INSTRUCTOR = "boundprof"
RANKS = 3  # exercise 02's widest run
ASKED = 64  # more jobs than any host's memory holds at 6 GiB a process

# What a grading run decides at start, run as a script: the jobs left of ASKED, the line it said, why no cgroup.
DECIDE = f"""
import contextlib, io, json
from grader.gradebook.grading_jobs import job_limits
from grader.gradebook.course import Course
from grader.isolation.gpu_share import GpuShare
share, said = GpuShare(0, 0, {ASKED}), io.StringIO()
with contextlib.redirect_stderr(said):
    limits = job_limits(share, {RANKS}, False)
limits.close()
print(json.dumps({{"jobs": share.jobs, "said": said.getvalue(), "missing": limits.missing}}))
"""


def _expected_jobs() -> int:
    return min(ASKED, max(1, memory_fit.host_bytes() // memory_fit.per_job_bytes(RANKS)))


def _assert_said(said: str, jobs: int, own: str) -> None:
    lines = said.strip().splitlines()
    assert len(lines) == 1 and "no limit per job here" in lines[0], said
    assert f"--jobs {ASKED} -> {jobs}" in lines[0] and own in lines[0], said
    assert f"{memory_fit.REQUIRE_ENV}=1" in lines[0], said


def test_as_root_without_cgroups_jobs_drop_to_what_memory_holds(monkeypatch, capsys):
    monkeypatch.setenv(OFF_ENV, "0")
    share = GpuShare(0, 0, ASKED)
    job_limits(share, RANKS, False).close()
    assert share.jobs == _expected_jobs() < ASKED
    _assert_said(capsys.readouterr().err, share.jobs, "its own uid" if os.geteuid() == 0 else "user namespace")
    with pytest.raises(SandboxMissing, match=memory_fit.REQUIRE_ENV):
        job_limits(GpuShare(0, 0, 2), RANKS, True)


def test_a_lower_process_bound_fits_more_jobs():
    """GRADER_PROCESS_MEMORY lowers RLIMIT_DATA, and so fits more jobs (read when the sandbox module loads)."""
    script = "from grader.isolation import memory_fit; print(memory_fit.per_job_bytes(3))"
    env = dict(os.environ, GRADER_PROCESS_MEMORY=str(1 << 30))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert int(out.stdout) == 4 * (1 << 30) + 3 * memory_fit.sandbox.TMP_BYTES, out.stderr


def _refused(done: subprocess.CompletedProcess, course) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refuses to grade without one" in done.stderr and "docs/instructors.md" in done.stderr, done.stderr
    graded = course.results_dir(A)
    assert not os.path.isdir(graded) or not os.listdir(graded), "something was graded"


@pytest.fixture(scope="module")
def course_template(tmp_path_factory):
    course = generated_course(str(tmp_path_factory.mktemp("unbounded") / "course"))
    place(course, "ada", notebook_with(solution_answers()))
    return course.root


def test_as_root_with_cgroups_off_an_instructor_can_refuse_to_grade(course_template, tmp_path):
    root = shutil.copytree(course_template, str(tmp_path / "course"))
    env = dict(os.environ, HOME=str(tmp_path), **{OFF_ENV: "0", memory_fit.REQUIRE_ENV: "1"})
    env.pop("XDG_STATE_HOME", None)
    done = subprocess.run(grade_args(root), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    _refused(done, Course(root))


@pytest.mark.skipif(bool(accounts.missing()), reason=accounts.missing() or "-")
def test_as_a_non_root_account_jobs_drop_and_it_can_refuse(course_template):
    """No cgroup is writable by an ordinary account here, and none is delegated to it."""
    with accounts.accounts([INSTRUCTOR]):
        home = accounts.home(INSTRUCTOR)
        python = accounts.instructor_python(os.path.join(home, "env"))
        root = shutil.copytree(course_template, os.path.join(home, "course"))
        subprocess.run(["chown", "-R", f"{INSTRUCTOR}:{INSTRUCTOR}", home], check=True, timeout=60)
        env = ["env", "-i", f"HOME={home}", f"PATH={os.path.dirname(python)}:/usr/bin:/bin"]
        decided = accounts.as_user(INSTRUCTOR, *env, python, "-c", DECIDE, cwd=ROOT)
        assert decided.returncode == 0, decided.stderr
        decided = json.loads(decided.stdout)
        assert decided["missing"] and decided["jobs"] == _expected_jobs() < ASKED, decided
        _assert_said(decided["said"], decided["jobs"], "its own user namespace")
        refused = accounts.as_user(
            INSTRUCTOR, *env, *grade_args(root, "--require-job-limits", python=python), cwd=ROOT, timeout=600
        )
        _refused(refused, Course(root))
