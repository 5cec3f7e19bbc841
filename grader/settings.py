"""Every setting of the grader in one table: the environment variables it reads and the Makefile's knobs.

    python -m grader config          what an instructor or a student may set, with its default and meaning
    python -m grader config --all    also the markers the grader sets for itself and the tests' hooks

Each variable is read where it acts (the module named in `where`); this table is where they are found, and
tests/test_settings.py keeps it true: a GRADER_*, COURSE_* or NBGRADER_* name the code reads and this table
misses (or the reverse) fails it. Per-run limits that are not variables are command-line options
(`python -m grader grade --help`).
"""

from __future__ import annotations

from dataclasses import dataclass

FOR_YOU, SET_BY_GRADER, TESTS_ONLY, MAKE = "instructor/student", "set by the grader", "tests only", "make VAR=..."


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    where: str
    who: str = FOR_YOU


SETTINGS = (
    Setting(
        "COURSE_LANG",
        "the locale, else en",
        "the language of exercises, hints and feedback (es, nl, ja)",
        "grader/i18n.py",
    ),
    Setting(
        "GRADER_NURSERY",
        "1",
        "0: one bubblewrap sandbox per job instead of torch-preloaded nurseries (slower)",
        "grader/isolation/nursery_client.py",
    ),
    Setting(
        "GRADER_JOB_MEMORY",
        str(6 << 30),
        "bytes of memory per grading job (its cgroup's memory.max)",
        "grader/isolation/job_limits.py",
    ),
    Setting(
        "GRADER_JOB_PIDS",
        "512",
        "processes and threads per grading job (its cgroup's pids.max)",
        "grader/isolation/job_limits.py",
    ),
    Setting(
        "GRADER_JOB_CPUS",
        "max(the host's CPUs, the widest run's ranks) + 1",
        "CPUs per grading job (its cgroup's cpu.max quota)",
        "grader/isolation/cpu_bound.py",
    ),
    Setting(
        "GRADER_JOB_CGROUPS",
        "1",
        "0: no cgroup per job (then --jobs drops to what memory holds)",
        "grader/isolation/job_limits.py",
    ),
    Setting(
        "GRADER_REQUIRE_JOB_LIMITS",
        "0",
        "1: refuse to grade where jobs cannot get a cgroup each",
        "grader/isolation/memory_fit.py",
    ),
    Setting(
        "GRADER_PROCESS_MEMORY",
        str(6 << 30),
        "bytes of data per sandboxed process (RLIMIT_DATA)",
        "grader/isolation/sandbox.py",
    ),
    Setting(
        "GRADER_SLOT_UIDS_FROM",
        "1900000000",
        "as root: the first uid of the range each grading job runs as",
        "grader/isolation/slot_uids.py",
    ),
    Setting(
        "GRADER_SANDBOX_STDERR",
        "",
        "1: show the sandboxes' own stderr (to debug a sandbox that will not start)",
        "grader/isolation/nursery_client.py",
    ),
    Setting(
        "GRADER_GPUCHECK_JSON", "gpucheck.json", "where make gpucheck writes its facts", "grader/instructor/gpucheck.py"
    ),
    Setting(
        "NBGRADER_EXCHANGE",
        ".nbgrader/exchange",
        "nbgrader's exchange folder (make lab, make collect)",
        "grader/gradebook/roundtrip.py",
    ),
    Setting(
        "NBGRADER_DB_URL",
        "sqlite in the course",
        "nbgrader's gradebook database (PostgreSQL on a hub)",
        "grader/gradebook/roundtrip.py",
    ),
    Setting(
        "NBGRADER_CACHE",
        ".nbgrader/cache (make lab)",
        "nbgrader's cache of submissions: make lab's, one per course; show_progress() reads submission times there",
        "grader/progress/submitted.py",
    ),
    Setting(
        "ASSIGNMENT", "02_ddp_basics", "the exercise make grade, report, collect and selfcheck act on", "Makefile", MAKE
    ),
    Setting("COURSE", "this folder", "the nbgrader course directory make grade reads", "Makefile", MAKE),
    Setting("JOBS", "one per core (and per GPU group)", "parallel grading jobs for make grade", "Makefile", MAKE),
    Setting("SANDBOX", "1", "0: make grade runs student code without bubblewrap (trusted code only)", "Makefile", MAKE),
    Setting("TEST_WORKERS", "2", "pytest workers for make test (0: one process)", "Makefile", MAKE),
    Setting("HUB_STUDENT_ENV", "/srv/ddp-course/student-env", "the students' venv make hub builds", "Makefile", MAKE),
    Setting(
        "NBGRADER_EXECUTION",
        "",
        "set by nbgrader's autograde: check() then grades quietly",
        "grader/notebook/__init__.py",
        SET_BY_GRADER,
    ),
    Setting(
        "GRADER_SANDBOXED",
        "",
        "1 inside a grading sandbox: its own loopback, no port locks",
        "grader/engine/processes.py",
        SET_BY_GRADER,
    ),
    Setting(
        "GRADER_HIDDEN_MASKED",
        "",
        "1 in a public-phase sandbox: no hidden check is imported",
        "grader/exercises/instructor.py",
        SET_BY_GRADER,
    ),
    Setting("GRADER_WORKER", "", "1 in a grading worker's ranks", "grader/engine/worker.py", SET_BY_GRADER),
    Setting(
        "GRADER_CUDA_WATCH",
        "",
        "1: ranks report which CUDA calls they made (make gpucheck)",
        "grader/instructor/gpucheck.py",
        SET_BY_GRADER,
    ),
    Setting("GRADER_FAKE_GPUS", "", "a GPU count the gate believes", "grader/isolation/gpu_gate.py", TESTS_ONLY),
    Setting(
        "GRADER_FAKE_EXCLUSIVE",
        "",
        "1: every GPU reads as in exclusive-process mode",
        "grader/engine/gpu_exclusive.py",
        TESTS_ONLY,
    ),
    Setting("GRADER_WARM_UP", "", "1: warm up gloo runs too", "grader/engine/launcher.py", TESTS_ONLY),
)


def table(everything: bool = False) -> str:
    rows = [s for s in SETTINGS if everything or s.who in (FOR_YOU, MAKE)]
    width = max(len(s.name) for s in rows)
    lines = []
    for s in rows:
        lines.append(f"{s.name:<{width}}  {s.help}")
        lines.append(f"{'':<{width}}  default: {s.default or '(unset)'}; {s.who}; read in {s.where}")
    return "\n".join(lines)


def register(sub) -> None:
    config = sub.add_parser("config", help="every setting (environment variables, make knobs) with its help")
    config.add_argument("--all", action="store_true", help="also what the grader sets itself and the tests' hooks")
    config.set_defaults(func=lambda args: print(table(args.all)) or 0)
