"""Where no cgroup bounds a job's memory: how many jobs the host's memory holds, and the start-up line saying so.

    fit = jobs_that_fit(ranks)      # jobs whose every process may reach its own bound without exhausting the host
    unbounded_notice(why, jobs, asked)

Without a cgroup (an instructor who is not root and has no delegated cgroup v2 subtree, or GRADER_JOB_CGROUPS=0),
a job's memory is bounded only per process: RLIMIT_DATA of each rank and of its worker (sandbox.DATA_BYTES), and
the sizes of its /tmp, HOME and /dev/shm (sandbox.TMP_BYTES each). Two jobs of four processes at their bound are
more than many hosts hold, and the kernel's OOM killer then picks its victim anywhere: a classmate's rank, the
grader, another user. So --jobs drops to what MemTotal holds at that bound; GRADER_REQUIRE_JOB_LIMITS=1 (or
`grade --require-job-limits`) refuses to grade instead.
"""

from __future__ import annotations

import os

from grader.isolation import sandbox
from grader.isolation.job_limits import OFF_ENV, PROCESSES_PER_JOB

REQUIRE_ENV = "GRADER_REQUIRE_JOB_LIMITS"  # "1": refuse to grade where jobs get no cgroup
TMPFS_PER_JOB = 3  # /tmp, HOME and /dev/shm


def required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def per_job_bytes(ranks: int) -> int:
    """What one job may hold at its per-process bounds: each rank and its worker, and its tmpfs."""
    return (ranks + 1) * sandbox.DATA_BYTES + TMPFS_PER_JOB * sandbox.TMP_BYTES


def host_bytes() -> int:
    """The host's memory (MemTotal), 0 where /proc/meminfo cannot say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def jobs_that_fit(ranks: int) -> int:
    """How many jobs the host holds with every process at its bound (at least one: a class is still graded)."""
    host = host_bytes()
    return max(1, host // per_job_bytes(ranks)) if host else 1


def unbounded_notice(why: str, jobs: int, asked: int, ranks: int) -> str:
    """The one line said at start where jobs get no cgroup: what still bounds each job, what does not, and --jobs."""
    own = "its own uid" if os.geteuid() == 0 else "its own user namespace"
    gib = 1 << 30
    line = (
        f"grader: no limit per job here ({why}): each job's processes are bounded by {own} "
        f"(RLIMIT_NPROC {PROCESSES_PER_JOB}), its memory only per process ({ranks + 1} processes of at most "
        f"{sandbox.DATA_BYTES / gib:g} GiB, RLIMIT_DATA) and by its /tmp and /dev/shm sizes, its CPU not at all"
    )
    if jobs < asked:
        line += f"; --jobs {asked} -> {jobs}, what this host's {host_bytes() / gib:.0f} GiB holds at that bound"
    hint = "docs/instructors.md: a delegated cgroup" if os.environ.get(OFF_ENV) != "0" else f"unset {OFF_ENV}"
    return line + f" ({REQUIRE_ENV}=1 refuses to grade so; {hint})"


def refusal(why: str) -> str:
    """The error where an instructor asked never to grade without a bound per job."""
    return (
        f"no limit per job here ({why}), and {REQUIRE_ENV}=1 (--require-job-limits) refuses to grade without one: "
        "grade as root, or in a delegated cgroup v2 subtree (docs/instructors.md)"
    )
