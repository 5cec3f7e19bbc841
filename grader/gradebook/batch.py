"""Grade every submission of an assignment, in parallel, outside the students' kernels.

    python -m grader grade 02_ddp_basics [--root COURSE] [--jobs N]

The authoritative score comes from the checks run on the answer cells
extracted from each submission, in fresh processes: nothing a student's code
does in its own kernel (patching the grader, hiding tracebacks, reading
NBGRADER_EXECUTION) reaches it. What the run needs is checked first
(preflight.py). The parent alone writes graded/<assignment>/<student>.json
(results.py), with the digest of what was graded, so a re-run skips what is
done (idempotent), a run killed halfway resumes, and a result file forged by
student code is put back and flagged. Worker processes are long-lived
(worker_pool.py): each keeps its forkserver warm across the submissions it grades, and grades each
as grade_job.py says.
"""

from __future__ import annotations

import json
import os
import re
import sys

from grader import cells
from grader.code_digest import grader_digest
from grader.gradebook import course_access
from grader.gradebook.course import Course
from grader.gradebook.grading_jobs import job_limits, run_workers, share_gpus, widest_run
from grader.isolation import memory_fit, sandbox_env
from grader.isolation import sandbox as sandboxes
from grader.isolation.gpu_gate import check_gpus
from grader.isolation.nursery_client import nursery_notice, use_nursery
from grader.isolation.worker_pool import Job
from grader.gradebook.preflight import check_ready
from grader.gradebook.results import ResultStore
from grader.gradebook.snapshot import Snapshot
from grader.gradebook.grade_job import merge_phases, unreadable_report

_TAG = re.compile(r"<[^>]*>")


def in_notebook_results(data: bytes | None) -> dict[str, bool]:
    """What the submitted notebook's own check cells showed: task -> passed. check() writes a
    display (display_data, updated in place, text/plain and text/html); print() and results count too."""
    try:
        nb_cells = json.loads(data.decode("utf-8"))["cells"]
        checks = cells.check_cells(nb_cells if isinstance(nb_cells, list) else [])
    except Exception:
        return {}
    shown = {}
    for task, cell in checks.items():
        outputs = cell.get("outputs")
        if not isinstance(outputs, list) or not outputs:
            continue
        texts, error = [], False
        for out in outputs:
            if not isinstance(out, dict):
                continue
            error |= out.get("output_type") == "error" or (
                out.get("output_type") == "stream" and out.get("name") == "stderr"
            )
            data_ = out.get("data") if isinstance(out.get("data"), dict) else {}
            for part in (out.get("text"), data_.get("text/plain"), data_.get("text/html")):
                part = "".join(part) if isinstance(part, list) else part
                if isinstance(part, str):
                    texts.append(_TAG.sub(" ", part))
        text = "\n".join(texts)
        shown[task] = "✓" in text and "✗" not in text and not error
    return shown


def _valid(result: dict | None, digest: str | None, version: str, sandboxed: bool) -> bool:
    return (
        bool(result)
        and result.get("sha256") == digest
        and result.get("grader") == version
        and not result.get("regrade")
        and (result.get("sandboxed", False) or not sandboxed)
    )  # a sandboxed run regrades unsandboxed results


class _Guard:
    """Between ticks: did any result file, submission, the gradebook or the course configuration change?
    Put it back, and flag the students whose code may have run then (named alone when only one could have)."""

    def __init__(self, store: ResultStore, snapshot: Snapshot, owner: dict[str, str], watched: dict[str, str], sandbox):
        self.store, self.snapshot, self.watched, self.sandbox = store, snapshot, watched, sandbox
        self.owner = owner  # a submission's file -> its student
        self.flags: dict[str, list[str]] = {}

    def flag(self, student: str, why: str) -> None:
        if why not in self.flags.setdefault(student, []):
            self.flags[student].append(why)

    def tick(self, suspects: set[str]) -> None:
        forged = self.store.forged()
        self.store.restore(forged)
        events = [f"result file {name} was forged (the grader's own result was put back)" for name in forged]
        for path in self.snapshot.restore_changed():
            if self.sandbox:  # no student code reaches the course from a sandbox: someone outside changed it
                what = self.watched.get(path) or f"{self.owner.get(path, path)}'s submission ({path})"
                print(
                    f"grader: {what} was changed while the class was graded, not from a sandbox: put back "
                    "(grades come from what was read before any grading)",
                    file=sys.stderr,
                )
            elif path in self.watched:
                events.append(f"{self.watched[path]} was changed while the class was graded (restored)")
            else:
                events.append(
                    f"{self.owner.get(path, path)}'s submission was changed while the class was graded "
                    f"(the original was restored)"
                )
        for event in events:
            for student in sorted(suspects):
                others = sorted(suspects - {student})
                self.flag(
                    student,
                    event
                    + (
                        f"; this submission was graded then, with {', '.join(others)}"
                        if others
                        else "; only this submission was being graded then"
                    ),
                )


def grade_assignment(
    course: Course,
    assignment: str,
    jobs: int | None = 2,
    timeout: float = 30.0,
    world_size: int = 2,
    progress: bool = True,
    shard: tuple[int, int] | None = None,
    sandbox: bool = True,
    no_gpu: bool = False,
    require_limits: bool = False,
) -> dict[str, dict]:
    """Grade every collected submission (or shard (i, n): every n-th student from the i-th, in name order);
    returns student -> result. sandbox: each submission's public checks, then its hidden ones, in a sandbox
    (sandbox.py): a job forked from that phase's nursery (nursery.py), or with GRADER_NURSERY=0 a bubblewrap
    sandbox of its own; False grades in long-lived workers outside any sandbox, and every result
    says so. Raises preflight.NotReady, sandbox.SandboxMissing (also where jobs would get no cgroup and
    require_limits or GRADER_REQUIRE_JOB_LIMITS=1 asks never to grade so) or gpu_gate.GpuUnusable (NVIDIA GPUs CUDA
    cannot use where the ranks run; no_gpu: grade on CPU), before anything is graded or written."""
    _say_up_front(course, sandbox)
    submissions, refused = check_ready(course, assignment)
    version = grader_digest(assignment)
    worker_args = [assignment, "--timeout", str(timeout), "--world-size", str(world_size), "--version", version]
    gate = check_gpus(worker_args, sandbox, sandbox and use_nursery(), no_gpu)
    share = share_gpus(gate.gpus, assignment, world_size, jobs)
    ranks = widest_run(assignment, world_size)
    if shard is not None:
        mine = set(sorted(set(submissions) | set(refused))[shard[0] :: shard[1]])
        submissions = {s: p for s, p in submissions.items() if s in mine}
        refused = {s: why for s, why in refused.items() if s in mine}
    # earlier results, read before any student code runs (a shard watches only its own students' files)
    store = ResultStore(course.results_dir(assignment), list(submissions) + list(refused) if shard else None, version)
    watched = course.instructor_files()  # nbgrader_config.py, the SQLite gradebook, its journal and WAL
    owner = {f: s for s, path in submissions.items() for f in (path, timestamp_of(path), secret_of(path))}
    snapshot = Snapshot(list(owner) + list(watched))  # all that is read of submitted/, once, before grading
    guard = _Guard(store, snapshot, owner, watched, sandbox)
    accepted = _earlier_results(store, snapshot, submissions, version, sandbox, guard)
    queue: list[Job] = []
    on_result = _PhaseJoiner(store, snapshot, submissions, version, sandbox, guard, accepted, queue)
    limits = None
    try:
        queue.extend(_first_jobs(submissions, accepted, snapshot, sandbox))
        if sandbox and queue:
            limits = job_limits(share, ranks, require_limits or memory_fit.required())
        desc = f"grading {assignment}" + ("" if sandbox else " (UNSANDBOXED)")
        run_workers(queue, worker_args, limits, share, on_result, guard, progress, len(submissions), desc)
        guard.tick(set())  # put back anything changed after the last tick (no one left to name)
    finally:
        if limits is not None:
            limits.close()
        snapshot.close()
    results = _class_results(assignment, submissions, refused, accepted, guard, snapshot, sandbox)
    for student in list(accepted) + list(refused):
        store.accept(student, results[student])  # flags kept with the result: the report and later runs see them
    guard.tick(set())
    return results


def _say_up_front(course: Course, sandbox: bool) -> None:
    """Stop if the sandbox is missing; then one line each for what the grader does differently on this machine."""
    notices = [course_access.warning(course.root)]  # other accounts could read answers and results
    if sandbox:
        sandboxes.require()
        notices += [nursery_notice(), sandbox_env.nccl_env_notice()]
    for notice in filter(None, notices):
        print(notice, file=sys.stderr)


def _class_results(assignment, submissions, refused, accepted, guard, snapshot, sandbox) -> GradedClass:
    """Every student's final result, and what was read of each submission before any grading."""
    results = GradedClass(
        {
            student: _final_result(student, assignment, accepted.get(student), guard, snapshot.content[path], sandbox)
            for student, path in submissions.items()
        }
    )
    for student, why in refused.items():
        results[student] = refused_result(student, assignment, why, sandbox)
    results.submitted = {
        s: {
            f"{assignment}.ipynb": snapshot.content[p],
            TIMESTAMP: snapshot.content[timestamp_of(p)],
            SECRET: snapshot.content[secret_of(p)],
        }
        for s, p in submissions.items()
    }
    return results


TIMESTAMP = "timestamp.txt"  # nbgrader's: when the submission was made (its late penalty), beside the notebook


def timestamp_of(notebook: str) -> str:
    return os.path.join(os.path.dirname(notebook), TIMESTAMP)


SECRET = "submission_secret.txt"  # nbgrader's: release_feedback names a student's feedback by it


def secret_of(notebook: str) -> str:
    return os.path.join(os.path.dirname(notebook), SECRET)


class GradedClass(dict):
    """student -> result, and in `submitted` what was read of each submission before any grading (file name ->
    bytes, None when there was no plain file): the only copy of it that later steps (the gradebook's autograde)
    use, so nothing reads submitted/ again."""

    submitted: dict[str, dict[str, bytes | None]] = {}


def refused_result(student: str, assignment: str, why: str, sandbox: bool) -> dict:
    """A submission nothing of which was read (submitted_files.py): every check 0 saying so, flagged with `why`,
    never kept as valid (no digest), so the next run grades it again once it is collected anew."""
    report = unreadable_report(assignment, why)
    return {
        "student": student,
        "assignment": assignment,
        "readable": False,
        "sha256": None,
        "error": "not graded",
        "report": report,
        "sandboxed": sandbox,
        "run_flags": [why],
        "flags": [why],
        "in_notebook": {},
        "plans": [],
        "regrade": False,
    }


def _earlier_results(store, snapshot, submissions, version, sandbox, guard) -> dict[str, dict]:
    """The stored results still valid for the submission as it is now (student -> result); a stored result
    the grader did not seal is flagged and its submission graded again."""
    accepted = {
        s: r for s in submissions if _valid(r := store.earlier(s), snapshot.digest(submissions[s]), version, sandbox)
    }
    for student in store.unsealed:  # written between runs by something other than the grader
        guard.flag(
            student,
            f"the stored result {student}.json was not sealed by the grader (forged after an "
            f"earlier run): ignored, and the submission graded again",
        )
    return accepted


def _first_jobs(submissions, accepted, snapshot, sandbox) -> list[Job]:
    """A job for each submission not graded yet, on the grader's private copy of it: its public phase, or
    unsandboxed both phases at once."""
    queue = []
    for student in (s for s in submissions if s not in accepted):
        path = snapshot.private_copy(submissions[student], f"{student}.ipynb")
        if path is not None:
            os.chmod(path, 0o644)  # the sandbox's worker (nobody) reads it; its folder stays private
        queue.append(Job(student, path, submissions[student], "public" if sandbox else "all"))
    return queue


class _PhaseJoiner:
    """The pool's on_result: a public phase that read the notebook queues its hidden phase; the hidden one
    (or an unsandboxed job's only one) completes the result, accepted and stored if the grader's copy of the
    submission did not change meanwhile. Returns whether the submission is done."""

    def __init__(self, store, snapshot, submissions, version, sandbox, guard, accepted, queue):
        self.store, self.snapshot, self.submissions = store, snapshot, submissions
        self.version, self.sandbox, self.guard = version, sandbox, guard
        self.accepted, self.queue = accepted, queue
        self.public: dict[str, dict] = {}  # student -> the public phase's result, until its hidden phase reports

    def __call__(self, job: Job, result: dict) -> bool:
        student = job.student
        if result.get("phase") != job.phase:
            self.guard.flag(
                student,
                "a message that was not the grader's reached the grader's pipe while this "
                "submission was graded (ignored)",
            )
            return False
        if job.phase == "public" and result.get("readable"):
            self.public[student] = result
            self.queue.append(Job(student, job.path, job.shown_as, "hidden", result.get("hung") or {}))
            return False
        if job.phase != "all":
            result = merge_phases(self.public.pop(student, result), result if job.phase == "hidden" else None)
        result = {k: v for k, v in result.items() if k not in ("phase", "hung")}
        result["sandboxed"] = self.sandbox
        if _valid(result, self.snapshot.digest(self.submissions[student]), self.version, self.sandbox):
            self.accepted[student] = result
            self.store.accept(student, result)
        else:
            self.guard.flag(student, "the grader's copy of this submission changed while it was graded; regrade it")
        return True


def _final_result(student: str, assignment: str, result: dict | None, guard, content: bytes, sandbox: bool) -> dict:
    """The stored result with the run's flags, the checks the notebook itself showed, plans and regrade."""
    if result is None:  # a worker died on it, or it changed while being graded
        result = {
            "student": student,
            "assignment": assignment,
            "readable": False,
            "sha256": None,
            "error": "grading did not finish (a grader worker died on this submission, or its copy "
            "changed while graded); the next run grades it again",
            "report": None,
            "sandboxed": sandbox,
        }
    result["run_flags"] = list(dict.fromkeys(result.get("run_flags", []) + guard.flags.get(student, [])))
    result["in_notebook"] = in_notebook_results(content)
    result["flags"] = _flags(result)
    result["plans"] = plans_of(result)
    result["regrade"] = any(c.get("unrunnable") for c in (result.get("report") or {}).get("checks") or [])
    return result


def plans_of(result: dict) -> list[str]:
    """The hardware plans a submission's runs used, as its checks say them (the worker's plans, never a rank's)."""
    checks = (result.get("report") or {}).get("checks") or []
    return list(dict.fromkeys(p for c in checks for p in str(c.get("plan") or "").split("; ") if p))


def _flags(result: dict) -> list[str]:
    flags = []
    report = result.get("report") or {"checks": []}
    failed_tasks = {c["task"] for c in report["checks"] if not c["passed"]}
    for task, shown_pass in sorted(result["in_notebook"].items()):
        if shown_pass and task in failed_tasks:
            flags.append(f"the notebook shows ✓ for {task}, but the grader's own run fails it")
    for c in report["checks"]:
        if c.get("tampered"):
            flags.append(f"the submission changed the grader while {c['task']}: {c['name']} ran (0 points for it)")
    return flags + result["run_flags"]
