"""The jobs of one class run: the GPUs shared out among them, each one's cgroup (or, without cgroups, fewer jobs),
a uid of its own as root, and the pool of grading workers that runs them (batch.py's grade_assignment).
"""

from __future__ import annotations

import os
import sys

from grader.engine.processes import adopting_orphans
from grader.exercises import get_exercise
from grader.isolation import memory_fit
from grader.isolation import sandbox as sandboxes
from grader.isolation.cpu_bound import job_cpus
from grader.isolation.gpu_share import GpuShare
from grader.isolation.job_limits import JobLimits
from grader.isolation.nursery_client import Nurseries, use_nursery
from grader.isolation.slot_uids import SlotUids
from grader.isolation.worker_pool import Workers, run_pool


def job_limits(share: GpuShare, ranks: int, required: bool) -> JobLimits:
    """This run's cgroups (job_limits.py), each job's CPU quota sized to its widest run. Where there are none: the
    start-up line says so, and --jobs drops to what the host's memory holds (memory_fit.py); or, required,
    sandbox.SandboxMissing."""
    limits = JobLimits.here(job_cpus(ranks), share.jobs)
    if not limits.missing:
        return limits
    if required:
        raise sandboxes.SandboxMissing(memory_fit.refusal(limits.missing))
    asked, share.jobs = share.jobs, min(share.jobs, memory_fit.jobs_that_fit(ranks))
    print(memory_fit.unbounded_notice(limits.missing, share.jobs, asked, ranks), file=sys.stderr)
    return limits


def run_workers(queue, worker_args, limits, share, on_result, guard, progress, total, desc) -> None:
    """The pool of share.jobs grading workers over the queue: sandboxed (limits not None: nurseries, a cgroup and,
    as root, a uid per job) or not; everything it started is closed when it returns or raises."""
    jobs, sandbox = share.jobs, limits is not None
    uids = slot_uids(jobs) if sandbox and queue and os.geteuid() == 0 else None
    nurseries = Nurseries(worker_args, jobs + 2) if sandbox and queue and use_nursery() else None
    workers = Workers(
        worker_args,
        (lambda argv, job, uid=None: sandboxes.Sandbox(argv, job.path, job.phase == "public", jobs + 1, uid=uid))
        if sandbox
        else None,
        nurseries,
        limits,
        share if share.gpus else None,
        uids,
    )
    try:
        with adopting_orphans():  # what a submission left behind (double fork, setsid) dies with the run
            run_pool(queue, workers, jobs, on_result, guard.flag, guard.tick, progress, total, desc)
    finally:
        if nurseries is not None:
            nurseries.close()
        if uids is not None:
            uids.close()


def slot_uids(jobs: int) -> SlotUids:
    """As root, a uid of its own for each job running or starting (twice that: a freed one rests)."""
    try:
        return SlotUids.here(2 * (jobs + 2))
    except OSError as exc:
        raise sandboxes.SandboxMissing(f"cannot reserve a uid of its own for each grading job: {exc}") from None


def share_gpus(gpus: int, assignment: str, world_size: int, jobs: int | None) -> GpuShare:
    """How the GPUs CUDA counts where the ranks run are shared out among the jobs (jobs None: the default)."""
    share = GpuShare.plan(gpus, world_size, widest_run(assignment, world_size), os.cpu_count() or 1, jobs)
    if share.gpus:
        print(f"grading on {share.describe()}", file=sys.stderr)  # up front, in one line
    return share


def widest_run(assignment: str, world_size: int) -> int:
    """The ranks of the exercise's widest run (its hidden checks' 3), or the grading world size if wider."""
    return max([world_size] + [c.world_size or 0 for c in get_exercise(assignment).checks])
