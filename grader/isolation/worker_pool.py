"""Long-lived grading workers (`python -m grader.isolation.grading_worker`) and the parent's side of them.

Each job line the parent sends carries a fresh random token; the worker sends
its result back as one JSON line with that token. The worker takes both of its
descriptors private before it starts anything (result_channel.py: non-dumpable, fd 0
and 1 replaced), so no process of the job holds or can take them. A line with a
wrong token, another student or a second result is ignored and reported. The
parent reads every worker without blocking, at most RESULT_LIMIT bytes a line:
a worker that sends more without a newline is stopped and its student flagged.

Unsandboxed, a worker is long-lived and grades job after job, keeping its
forkserver warm. Sandboxed (sandbox.py), each job gets a fresh worker that sees
that one submission only and ends after it: forked from its phase's nursery into
namespaces of its own (nursery.py, nursery_job.py; the default as root), or, with
GRADER_NURSERY=0, a fresh worker in a bubblewrap sandbox of its own.
While `jobs` workers grade, the next job's sandbox is started already: its cold
start (bwrap, the torch import, the forkserver) overlaps their work and their
waits, and it is handed its job line (before which no student code runs in it)
when a slot frees.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from tqdm import tqdm

from grader.engine import kill_tree
from grader.isolation.sandbox import SUBMISSION

SUBMISSION_BOUND_S = 900  # a whole submission, every check bounded already; this only guards the worker
RESULT_LIMIT = 16 << 20  # bytes of one result line; a result is tens of KiB (each output is bounded: OUTPUT_LIMIT)


class Lines:
    """What one worker sent, read without ever blocking: its complete lines, each at most RESULT_LIMIT bytes."""

    def __init__(self, stream):
        self.fd, self.pending, self.scanned = stream.fileno(), bytearray(), 0
        os.set_blocking(self.fd, False)

    def read(self) -> tuple[list[str], bool]:
        """(complete lines now readable, whether the worker's end is closed). Raises OverflowError once more
        than RESULT_LIMIT bytes came without a newline."""
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return [], False
        except OSError:
            data = b""
        if not data:
            return [], True
        self.pending += data
        lines = []
        while (end := self.pending.find(b"\n", self.scanned)) >= 0:
            lines.append(self.pending[:end].decode("utf-8", "replace"))
            del self.pending[: end + 1]
            self.scanned = 0
        self.scanned = len(self.pending)
        if len(self.pending) > RESULT_LIMIT:
            raise OverflowError(len(self.pending))
        return lines, False


@dataclass
class Job:
    """One submission to grade, in one phase: "all" checks, or the "public" then the "hidden" ones."""

    student: str
    path: str | None  # the parent's private copy
    shown_as: str  # the submitted path, as error messages name it
    phase: str = "all"
    hung: dict = field(default_factory=dict)  # task -> a check that hung in the public phase


class Workers:
    """How workers start: one long-lived `python -m grader.isolation.grading_worker ARGS` process each (sandbox None),
    or one sandboxed worker per job; then a job line names the submission as the sandbox shows it."""

    def __init__(
        self,
        worker_args: list[str],
        sandbox: Callable[[list[str], Job], "object"] | None = None,
        nurseries=None,
        limits=None,
        gpus=None,
        uids=None,
    ):
        self.argv = [sys.executable, "-m", "grader.isolation.grading_worker", *worker_args]
        self.sandbox = sandbox
        self.nurseries = nurseries  # sandboxed: each job forked from its phase's nursery (nursery_client.py)
        self.limits = limits  # sandboxed: job_limits.JobLimits, a cgroup per job where the machine allows
        self.gpus = gpus  # gpu_share.GpuShare: each job's own GPUs, named in its job line (None: no sharing)
        self.uids = uids  # sandboxed as root: slot_uids.SlotUids, each job's own uid

    def start(self, job: Job | None) -> subprocess.Popen:
        sandboxed = self.sandbox is not None
        group = self.limits.new_group() if self.limits is not None and sandboxed else None
        uid = self.uids.take() if self.uids is not None and sandboxed else None
        try:
            proc = self._start(job, group, uid)
        except BaseException:
            if group is not None:
                group.close()
            self.give_back_uid(uid)
            raise
        proc.group, proc.student, proc.uid = group, job.student if job else None, uid
        return proc

    def give_back_uid(self, uid: int | None) -> None:
        """The job's uid, once every process of the job has been killed (worker_pool.py's release)."""
        if uid is not None:
            self.uids.give(uid)

    def _start(self, job: Job | None, group, uid: int | None) -> subprocess.Popen:
        if self.nurseries is not None:
            return self.nurseries.start(job.path, job.phase == "public", group, uid)
        argv, env, stderr = self.argv, None, None
        if self.sandbox is not None:
            box = self.sandbox(self.argv, job, uid) if uid is not None else self.sandbox(self.argv, job)
            argv, env = box.argv, box.env
            stderr = None if os.environ.get("GRADER_SANDBOX_STDERR") else subprocess.DEVNULL
            if group is not None:
                argv = group.join_argv(argv)
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            bufsize=1,
            encoding="utf-8",
            start_new_session=True,
            env=env,
        )

    def path_seen(self, job: Job) -> str:
        if job.path is None:
            return ""
        return SUBMISSION if self.sandbox else job.path


def run_pool(
    queue: list[Job],
    workers: Workers,
    jobs: int,
    on_result: Callable[[Job, dict], bool],
    on_stray: Callable[[str, str], None],
    on_tick: Callable[[set[str]], None],
    progress: bool,
    total: int,
    desc: str,
) -> None:
    """Grade the queued jobs in `jobs` workers. on_result(job, result) for each genuine result, returns
    whether the submission is done (it may queue its next phase); on_stray(student, why) for a message
    that is not; on_tick(students whose code may have run since the last tick) at least once a second."""
    if not queue:
        return
    bar = tqdm(
        total=total,
        initial=total - len({j.student for j in queue}),
        desc=desc,
        unit="submission",
        disable=not progress,
        file=sys.stderr,
    )
    pool = _Pool(queue, workers, jobs, on_result, on_stray, bar)
    try:
        pool.fill()
        while pool.running:
            pool.serve_once()
            on_tick(set(pool.window))
            pool.window = {job["job"].student for job in pool.running.values() if job}
    finally:
        pool.close()
        bar.close()


class _Pool:
    """run_pool's state: the running workers (each with its job, token and GPUs, or None between jobs), the
    sandboxed worker started ahead for the next job, and whose code may have run since the last tick."""

    def __init__(self, queue: list[Job], workers: Workers, jobs: int, on_result, on_stray, bar):
        self.queue, self.workers, self.jobs, self.on_result, self.on_stray, self.bar = (
            queue,
            workers,
            jobs,
            on_result,
            on_stray,
            bar,
        )
        self.selector = selectors.DefaultSelector()
        self.running: dict[subprocess.Popen, dict | None] = {}
        self.warm: list[tuple[subprocess.Popen, Job]] = []  # sandboxed: the next job's worker, started, not yet fed
        self.window: set[str] = set()  # students whose code may have run since the last tick
        self.looked = 0.0  # when look_at_cpus last looked

    def fill(self) -> None:
        while (self.queue or self.warm) and len(self.running) < self.jobs:  # a result may have queued a next phase
            self.start_worker()

    def serve_once(self) -> None:
        """Read what the workers wrote (at most a second's wait), stop the ones past their bound, start more."""
        for key, _ in self.selector.select(timeout=1.0):
            proc, lines = key.data
            try:
                complete, ended = lines.read()
            except OverflowError:
                self.overflow(proc)
                continue
            for line in complete:
                if proc in self.running:
                    self.message(proc, line)
            if ended and proc in self.running:  # the worker ended: finished, or died on a submission
                self.lost(proc)
        for proc, job in list(self.running.items()):
            if job and time.monotonic() - job["since"] > SUBMISSION_BOUND_S:
                self.lost(proc)
        self.look_at_cpus()
        self.fill()
        self.prestart()

    def look_at_cpus(self) -> None:
        """Once a second, how many processes of each grading job want a CPU (job_limits.JobGroup.sample)."""
        if time.monotonic() - self.looked < 1.0:
            return
        self.looked = time.monotonic()
        for proc, job in self.running.items():
            if job and getattr(proc, "group", None) is not None:
                proc.group.sample()

    def start_worker(self) -> None:
        if self.warm:
            proc, job = self.warm.pop(0)
        else:
            job = self.queue.pop(0) if self.workers.sandbox else None
            proc = self.workers.start(job)
        self.selector.register(proc.stdout, selectors.EVENT_READ, (proc, Lines(proc.stdout)))
        self.running[proc] = None
        self.feed(proc, job)

    def feed(self, proc, job: Job | None = None) -> None:
        workers = self.workers
        if workers.sandbox is None:  # a long-lived worker takes the next job, or ends
            job = self.queue.pop(0) if self.queue else None
        if job is None:
            self.running[proc] = None
            proc.stdin.close()
            return
        devices = workers.gpus.take() if workers.gpus else None
        self.running[proc] = {"job": job, "token": secrets.token_hex(16), "since": time.monotonic(), "gpus": devices}
        self.window.add(job.student)
        fields = [
            job.student,
            workers.path_seen(job),
            job.shown_as,
            self.running[proc]["token"],
            job.phase,
            json.dumps(job.hung),
        ] + ([json.dumps(devices)] if devices is not None else [])  # its own GPUs
        try:
            proc.stdin.write("\t".join(fields) + "\n")
            proc.stdin.flush()
            if workers.sandbox is not None:
                proc.stdin.close()  # a sandboxed worker grades this one job only
        except OSError:
            pass  # the worker died before its job (a warm one): its end of stdout reads as lost below

    def give_back(self, job) -> None:  # the job's GPUs, for the next job
        if job is not None and self.workers.gpus:
            self.workers.gpus.give(job.get("gpus"))

    def stop(self, proc) -> None:
        self.selector.unregister(proc.stdout)
        self.give_back(self.running.pop(proc))
        if proc.pid is not None:  # None: a nursery job that never started
            kill_tree(proc.pid)  # the worker, its forkserver and any rank still running (a sandbox: everything in it)
        proc.wait(timeout=10)
        self.release(proc)

    def release(
        self, proc
    ) -> None:  # the job's cgroups: what it ran into is told to its author; what it left is killed
        self.workers.give_back_uid(getattr(proc, "uid", None))  # its PID namespace ended: nothing of it runs as the uid
        group = getattr(proc, "group", None)
        if group is None:
            return
        for limit in group.exceeded():
            self.on_stray(
                proc.student,
                f"this submission's code ran into its job's limit on {limit}; a check that "
                "failed then may have failed because of it",
            )
        group.close()

    def message(self, proc, line: str) -> None:
        job = self.running[proc]
        try:
            token, result = line.split("\t", 1)
            result = json.loads(result)
        except ValueError:
            token, result = None, None
        if (
            job is None
            or token != job["token"]
            or not isinstance(result, dict)
            or result.get("student") != job["job"].student
        ):
            if job is not None:
                self.on_stray(
                    job["job"].student,
                    "a message that was not the grader's reached the grader's pipe "
                    "while this submission was graded (ignored)",
                )
            return
        self.running[proc] = None
        self.give_back(job)
        if self.on_result(job["job"], result):
            self.bar.update(1)
        if self.workers.sandbox is None:
            self.feed(proc)

    def overflow(self, proc) -> None:  # more than a result, without a newline: only student code writes that
        if self.running.get(proc) is not None:
            self.on_stray(
                self.running[proc]["job"].student,
                f"more than {RESULT_LIMIT >> 20} MiB without a line end reached the grader's result channel "
                "while this submission was graded: its grading was stopped",
            )
        self.lost(proc)

    def lost(self, proc) -> None:  # the worker ended or was stopped before its result: the submission stays ungraded
        if self.running.get(proc) is not None:
            self.bar.update(1)
        self.stop(proc)
        self.fill()

    def prestart(self) -> None:
        if self.workers.sandbox is not None and self.queue and not self.warm and len(self.running) >= self.jobs:
            job = self.queue.pop(0)
            self.warm.append((self.workers.start(job), job))

    def close(self) -> None:
        for proc in list(self.running):
            self.stop(proc)
        for proc, _ in self.warm:
            if proc.pid is not None:
                kill_tree(proc.pid)
            proc.wait(timeout=10)
            self.release(proc)
