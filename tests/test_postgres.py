"""The gradebook on a real PostgreSQL server, and grading in shards.

A throwaway PostgreSQL cluster (Debian's `postgresql`; .ci/install-services
installs it) in a temporary folder on a free port, stopped at the end. One
small class (two sample students: full marks, and two typical mistakes) goes
through the whole loop into SQLite, the embedded default, and into PostgreSQL
(NBGRADER_DB_URL): the grades must be identical. Two `make grade` runs at once
on one PostgreSQL gradebook lose nothing and write nothing twice. Shards
graded at once (`--shard i/n`) then merged give exactly the grades of one run.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from grader.gradebook import roundtrip
from grader.gradebook.inject import gradebook_scores
from tests.helpers import ROOT

A = "02_ddp_basics"
CLASS = ("ada", "ben")  # samples/submitted: everything right; forgets set_epoch and the loss all_reduce
BIN = os.path.dirname(sys.executable)
PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1:] or [""]
INITDB = os.path.join(PG_BIN[0], "initdb")
STEP_S = 600  # bound of one grading command on busy cores


def _env(db_url: str | None = None, **extra) -> dict:
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), **extra)  # nbgrader runs alembic
    env.pop("NBGRADER_DB_URL", None)
    if db_url:
        env["NBGRADER_DB_URL"] = db_url
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing_postgres() -> str:
    if not os.access(INITDB, os.X_OK):
        return "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (Debian's `postgresql`; .ci/run installs it)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return ""


@pytest.fixture(scope="module")
def postgres():
    """A throwaway cluster; yields a function db(name) -> URL of a fresh database."""
    if _missing_postgres():
        pytest.skip(_missing_postgres())
    data = pathlib.Path(tempfile.mkdtemp(prefix="pg-"))  # not under pytest's 0700 folders: postgres reads it
    as_owner = []
    if os.geteuid() == 0:  # initdb and pg_ctl refuse to run as root
        shutil.chown(data, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(cmd):
        proc = subprocess.run(as_owner + cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}{proc.stderr}"

    run([INITDB, "-D", str(data / "db"), "-A", "trust", "-U", "postgres", "--no-sync"])
    run(
        [
            os.path.join(PG_BIN[0], "pg_ctl"),
            "-D",
            str(data / "db"),
            "-w",
            "-t",
            "60",
            "-l",
            str(data / "log"),
            "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        ]
    )
    try:

        def db(name: str) -> str:
            run([os.path.join(PG_BIN[0], "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", name])
            return f"postgresql://postgres@127.0.0.1:{port}/{name}"

        yield db
    finally:
        subprocess.run(
            as_owner
            + [os.path.join(PG_BIN[0], "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "-w", "-t", "60", "stop"],
            capture_output=True,
            timeout=90,
        )
        shutil.rmtree(data, ignore_errors=True)


def _course(root: str, db_url: str | None) -> roundtrip.Course:
    """The round trip up to collect: release, each student fetches, answers (a sample) and submits."""
    course = roundtrip.make_course(root, [A])
    env = _env(db_url, NBGRADER_EXCHANGE=roundtrip.exchange_root(root))
    for step in (["generate_assignment", A, "--force"], ["release_assignment", A, "--force"]):
        subprocess.run(
            [sys.executable, "-m", "nbgrader", *step, "--log-level=WARN"], cwd=root, env=env, check=True, timeout=300
        )
    for student in CLASS:
        shutil.copy(
            os.path.join(ROOT, "samples", "submitted", student, A, f"{A}.ipynb"), roundtrip.fetch(course, A, student)
        )
        roundtrip.submit(course, A, student)
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "collect", A, "--log-level=ERROR", roundtrip.PLAIN_COLLECT],
        cwd=root,
        env=env,
        check=True,
        timeout=300,
    )
    return course


def _copy_collected(source, root: str, db_url: str | None = None) -> roundtrip.Course:
    """A copy of a collected course, with nothing graded and a fresh gradebook (the assignment only)."""
    shutil.copytree(
        source.root,
        root,
        ignore=shutil.ignore_patterns("graded", "autograded", "feedback", "gradebook.db", "grades.csv"),
    )
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force", "--log-level=WARN"],
        cwd=root,
        env=_env(db_url),
        check=True,
        timeout=300,
    )
    return roundtrip.Course(root)


def _grade(course, db_url: str | None, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "grader", "grade", A, "--root", course.root, "--quiet", "--timeout", "10", *extra]
    return subprocess.Popen(cmd, env=_env(db_url), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _make_grade(course, db_url: str | None) -> subprocess.Popen:
    cmd = ["make", "-s", "-C", ROOT, "grade", f"ASSIGNMENT={A}", f"COURSE={course.root}", "JOBS=1"]
    return subprocess.Popen(cmd, env=_env(db_url), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(*procs: subprocess.Popen) -> list[str]:
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=STEP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate(timeout=30)
            pytest.fail(f"{proc.args} did not finish in {STEP_S} s:\n{out[-3000:]}")
        assert proc.returncode == 0, f"{proc.args} failed:\n{out[-3000:]}"
        outputs.append(out)
    return outputs


def _checks(course) -> dict:
    """student -> [(check, passed, points)] from graded/ (what the feedback says, check by check)."""
    import json

    found = {}
    for path in sorted(glob.glob(os.path.join(course.results_dir(A), "*.json"))):
        with open(path) as f:
            result = json.load(f)
        found[result["student"]] = [(c["name"], c["passed"], c["points"]) for c in result["report"]["checks"]]
    return found


def _scores(db_url: str) -> dict[str, tuple[float, float]]:
    """student -> (score, max score) in the gradebook at db_url."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        return {s.student.id: (s.score, s.max_score) for s in gb.find_assignment(A).submissions}


def _rows(db_url: str) -> dict[str, int]:
    """How many rows nbgrader's main tables hold."""
    from nbgrader.api import Gradebook
    from sqlalchemy import text

    with Gradebook(db_url) as gb:
        return {
            t: gb.db.execute(text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("student", "submitted_assignment", "submitted_notebook", "grade", "comment")
        }


@pytest.fixture(scope="module")
def sqlite_class(tmp_path_factory):
    """The reference: the class graded by one `python -m grader grade` into the embedded SQLite gradebook."""
    course = _course(str(tmp_path_factory.mktemp("sqlite") / "course"), None)
    _finish(_grade(course, None, "--jobs", "2"))
    assert course.db_url.startswith("sqlite:///")
    scores = gradebook_scores(course, A)
    assert set(scores) == set(CLASS) and scores["ada"] != scores["ben"], scores  # two different grades
    return course, scores, _checks(course)


@pytest.fixture(scope="module")
def postgres_class(postgres, tmp_path_factory):
    """The same class, every nbgrader step and `make grade` on a PostgreSQL gradebook."""
    url = postgres("gradebook")
    course = _course(str(tmp_path_factory.mktemp("postgres") / "course"), url)
    _finish(_make_grade(course, url))
    return course, url


def test_make_grade_on_postgresql_gives_the_sqlite_grades(sqlite_class, postgres_class):
    reference, scores, checks = sqlite_class
    course, url = postgres_class
    assert not os.path.exists(os.path.join(course.root, "gradebook.db"))
    assert _scores(url) == scores
    assert _checks(course) == checks
    # the rest of the loop reads the PostgreSQL gradebook too: feedback and the exported grades
    env = _env(url, NBGRADER_EXCHANGE=roundtrip.exchange_root(course.root))
    for step in (["generate_feedback", A, "--force"], ["export", "--to=grades.csv"]):
        subprocess.run(
            [sys.executable, "-m", "nbgrader", *step, "--log-level=WARN"],
            cwd=course.root,
            env=env,
            check=True,
            timeout=300,
        )
    with open(os.path.join(course.root, "feedback", "ben", A, f"{A}.html")) as f:
        assert "✗ train_one_epoch: train_calls_set_epoch" in f.read()
    with open(os.path.join(course.root, "grades.csv")) as f:
        rows = {line.split(",")[3]: line for line in f.read().splitlines()[1:]}
    assert set(rows) == set(CLASS)


def test_two_make_grade_runs_at_once_lose_nothing_and_write_nothing_twice(
    postgres, postgres_class, sqlite_class, tmp_path
):
    """Two instructors start `make grade` on one course and one fresh PostgreSQL gradebook at the same time
    (graded/ already holds the checks' results, so both runs write the gradebook at once)."""
    _, scores, checks = sqlite_class
    source, _ = postgres_class
    url = postgres("gradebook_concurrent")
    course = roundtrip.Course(str(tmp_path / "course"))
    shutil.copytree(source.root, course.root, ignore=shutil.ignore_patterns("autograded", "feedback"))  # graded/ kept
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force", "--log-level=WARN"],
        cwd=course.root,
        env=_env(url),
        check=True,
        timeout=300,
    )
    before = _rows(url)
    _finish(_make_grade(course, url), _make_grade(course, url))
    assert _scores(url) == scores
    assert _checks(course) == checks
    after = _rows(url)
    assert after["student"] - before["student"] == len(CLASS)
    assert after["submitted_assignment"] == len(CLASS) and after["submitted_notebook"] == len(CLASS)
    one = _rows(postgres_class[1])  # the gradebook graded once
    assert {t: after[t] for t in ("grade", "comment")} == {t: one[t] for t in ("grade", "comment")}


def test_shards_graded_at_once_give_exactly_the_grades_of_one_run(sqlite_class, tmp_path):
    reference, scores, checks = sqlite_class
    course = _copy_collected(reference, str(tmp_path / "course"))
    outputs = _finish(*(_grade(course, None, "--jobs", "1", "--shard", f"{i}/2") for i in range(2)))
    assert "shard 0/2: 1 submissions" in outputs[0] and "shard 1/2: 1 submissions" in outputs[1]
    assert not os.path.exists(os.path.join(course.root, "gradebook.db")) or not gradebook_scores(course, A)
    graded = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(course.results_dir(A), "*.json"))}
    assert len(graded) == len(CLASS)
    _finish(_grade(course, None))  # the merge: grades nothing again, writes the gradebook
    assert {p: os.path.getmtime(p) for p in graded} == graded, "the merge regraded a shard's submission"
    assert gradebook_scores(course, A) == scores
    assert _checks(course) == checks


def test_a_bad_shard_is_a_clear_error():
    for bad, says in (("2/2", "i must be in 0..n-1"), ("1", "wants i/n"), ("a/b", "wants i/n")):
        proc = subprocess.run(
            [sys.executable, "-m", "grader", "grade", A, "--shard", bad], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr


SLURM = ("slurmctld", "slurmd", "munged", "sbatch", "sinfo")


@pytest.fixture(scope="module")
def slurm():
    """A one-node Slurm cluster (Debian's slurm-wlm) in a temporary folder; yields its environment."""
    if os.geteuid() != 0 or not all(shutil.which(t) or os.path.exists(f"/usr/sbin/{t}") for t in SLURM):
        pytest.skip("needs root and Debian's slurm-wlm (slurmctld, slurmd, munged, sbatch)")
    d = pathlib.Path(tempfile.mkdtemp(prefix="slurm-"))
    os.chmod(d, 0o755)
    host, ports = socket.gethostname().split(".")[0], (_free_port(), _free_port())
    (d / "slurm.conf").write_text(f"""ClusterName=grading
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthInfo=socket={d}/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    os.makedirs(d / "state")
    os.makedirs(d / "spool")
    shutil.chown(d, "munge")
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"), PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    started = []
    try:
        subprocess.run(
            [
                "runuser",
                "-u",
                "munge",
                "--",
                "munged",
                f"--socket={d}/munge.socket",
                f"--pid-file={d}/munged.pid",
                f"--log-file={d}/munged.log",
                f"--seed-file={d}/munged.seed",
            ],
            check=True,
            timeout=30,
        )
        started.append(d / "munged.pid")
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-f", str(d / "slurm.conf")], check=True, timeout=30, env=env)
            started.append(d / f"{daemon}.pid")
        deadline = time.monotonic() + 60
        while (
            subprocess.run(
                ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env, timeout=30
            ).stdout.strip()
            != "idle"
        ):
            assert time.monotonic() < deadline, (d / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.5)
        yield env, d
    finally:
        for pid_file in reversed(started):
            try:
                pid = int(pid_file.read_text())
                os.kill(pid, 15)
                psutil.Process(pid).wait(timeout=20)
            except (OSError, ValueError, psutil.Error):
                pass
        shutil.rmtree(d, ignore_errors=True)


def test_a_slurm_job_array_grades_the_shards_then_one_job_merges(slurm, sqlite_class, tmp_path):
    env, d = slurm
    reference, scores, checks = sqlite_class
    course = _copy_collected(reference, str(tmp_path / "course"))
    grade = f"{sys.executable} -m grader grade {A} --root {course.root} --quiet --jobs 1 --timeout 10"
    array = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=0-1",
            "--cpus-per-task=1",
            f"--output={d}/shard-%a.out",
            "--wrap",
            f"{grade} --shard $SLURM_ARRAY_TASK_ID/2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout.strip()
    merge = subprocess.run(
        ["sbatch", "--wait", f"--dependency=afterok:{array}", f"--output={d}/merge.out", "--wrap", grade],
        capture_output=True,
        text=True,
        env=env,
        timeout=STEP_S,
    )
    logs = "".join(p.read_text() for p in sorted(d.glob("*.out")))
    assert merge.returncode == 0, merge.stdout + merge.stderr + logs
    assert "shard 0/2: 1 submissions" in logs and "shard 1/2: 1 submissions" in logs, logs
    assert gradebook_scores(course, A) == scores
    assert _checks(course) == checks
