"""A job's CPU: its quota (what its ranks may compute on, and one CPU for its worker), and when to flag it.

    cpus = job_cpus(ranks)               # GRADER_JOB_CPUS, else max(the host's CPUs, ranks) + 1
    set_quota(folder, version, cpus)     # v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max
    demand = Demand(cpus); demand.sample(pids)   # once a second while the job grades
    too_much(stat, demand, cpus, version)        # why the job is flagged, or ""

The quota bounds what a job takes from the host, and each job is one entity of the CPU scheduler (job_limits.py),
so a job of 200 spinning processes gets what a job of 3 ranks gets. A job is flagged, for the instructor's review
and never scored for it, when either holds:
- the kernel held it back at its quota in at least half of the 100 ms periods it ran in, and in at least 100 (10 s):
  it kept busy more threads than its ranks and worker compute on, for most of its life;
- more than twice its quota's CPUs of its processes wanted a CPU at once (state R) in at least half of the looks
  at it, once a second, and in at least 5: on a busy host the quota may never be reached, but a spinner's
  processes still all want a CPU. An honest job has its ranks, its worker and a few idle helpers: it cannot.
"""

from __future__ import annotations

import math
import os

CPUS_ENV = "GRADER_JOB_CPUS"  # CPUs per job; default: job_cpus
CPU_PERIOD_US = 100_000  # the kernel's default CFS period
THROTTLED_SHARE, THROTTLED_MIN_PERIODS = 0.5, 100
CROWD_FACTOR, CROWD_SHARE, CROWD_MIN_LOOKS = 2, 0.5, 5


def job_cpus(ranks: int) -> float:
    """The CPU quota of one job whose widest run has `ranks` ranks: a CPU for each thread its ranks may compute on
    (the engine gives a run's ranks the host's CPUs between them, at least one each: engine/launcher.py) and one for
    its worker. So an honest job is never held back for long: only a spinner outnumbers that."""
    return float(os.environ.get(CPUS_ENV) or max(os.cpu_count() or 1, ranks) + 1)


def set_quota(folder: str, version: int, cpus: float) -> None:
    quota = max(1000, round(cpus * CPU_PERIOD_US))
    files = (
        [("cpu.cfs_period_us", CPU_PERIOD_US), ("cpu.cfs_quota_us", quota)]
        if version == 1
        else [("cpu.max", f"{quota} {CPU_PERIOD_US}")]
    )
    for name, value in files:
        with open(os.path.join(folder, name), "w") as f:
            f.write(str(value))


class Demand:
    """How often more of a job's processes wanted a CPU at once than CROWD_FACTOR times its quota."""

    def __init__(self, cpus: float):
        self.crowd = math.floor(CROWD_FACTOR * cpus) if cpus > 0 else None  # None: no quota to compare with
        self.looks = self.crowded = self.most = 0

    def sample(self, procs_file: str) -> None:
        if self.crowd is None:
            return
        try:
            with open(procs_file) as f:
                pids = f.read().split()
        except OSError:
            return
        runnable = sum(_state(pid) == "R" for pid in pids)
        self.looks += 1
        self.crowded += runnable > self.crowd
        self.most = max(self.most, runnable)


def _state(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def too_much(stat: dict[str, int], demand: Demand, cpus: float, version: int) -> str:
    """Why this job's CPU is flagged ("" when it is not): stat is the cgroup's cpu.stat ({} without a quota)."""
    name = ("cgroup cpu.cfs_quota_us" if version == 1 else "cgroup cpu.max") if stat else "no quota set here"
    periods, throttled = stat.get("nr_periods", 0), stat.get("nr_throttled", 0)
    if throttled >= THROTTLED_MIN_PERIODS and throttled >= THROTTLED_SHARE * periods:
        return (
            f"CPU (at most {cpus:g} CPUs per job: {name}): it kept more processes busy than that in "
            f"{throttled} of the {periods} periods of {CPU_PERIOD_US // 1000} ms it ran in"
        )
    if demand.crowded >= CROWD_MIN_LOOKS and demand.crowded >= CROWD_SHARE * demand.looks:
        return (
            f"CPU (at most {cpus:g} CPUs per job: {name}): more than {demand.crowd} of its processes wanted "
            f"a CPU at once in {demand.crowded} of {demand.looks} looks, once a second (up to {demand.most})"
        )
    return ""
