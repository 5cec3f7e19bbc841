"""One grading job: a submission's private copy graded in a worker process (or a nursery's job), and the
parent's merge of a sandboxed submission's two phases.

    worker_main   reads jobs from the private channel (result_channel.py), answers each with grade_one's result
    grade_one     every check, or the public or the hidden ones, on one private copy
    merge_phases  the public and hidden phases as one result, as an unsandboxed run would give it

The parent side, which queues the jobs and keeps the results, is batch.py.
"""

from __future__ import annotations

import hashlib
import json

from grader.checks import CheckResult, Report
from grader.engine.plan import assign_gpus
from grader.exercises import get_exercise
from grader.isolation import result_channel as channel
from grader.runner import credit_skipped, run_checks
from grader.submission import SubmissionError, read_submission


def grade_one(
    assignment: str,
    student: str,
    path: str | None,
    timeout: float,
    world_size: int,
    version: str,
    shown_as: str = "",
    phase: str = "all",
    hung: dict | None = None,
) -> dict:
    """Grade one private copy of a submission (runs in a worker process): every check (phase "all"),
    or the "public" ones (in a sandbox where the hidden modules are masked: the exercise holds only
    those) or the "hidden" ones; the parent merges the two phases (merge_phases)."""
    data = None
    if path is not None:
        with open(path, "rb") as f:
            data = f.read()
    result = {
        "student": student,
        "assignment": assignment,
        "grader": version,
        "phase": phase,
        "sha256": hashlib.sha256(data).hexdigest() if data is not None else None,
    }
    exercise = get_exercise(assignment)
    try:
        if path is None:
            raise SubmissionError(f"no notebook named {assignment}.ipynb was submitted")
        report = run_checks(
            exercise,
            read_submission(path),
            world_size=world_size,
            timeout=timeout,
            hidden={"public": False, "hidden": True}.get(phase),
            hung_in=hung,
            credit=phase == "all",
        )
        result["readable"], result["error"] = True, None
        result["report"] = report.to_json()
        result["hung"] = {c.task: c.name for c in report.checks if c.hung}
    except SubmissionError as exc:
        exc = str(exc).replace(path, shown_as or f"{student}'s {assignment}.ipynb") if path else str(exc)
        result["readable"], result["error"] = False, exc
        result["report"] = unreadable_report(assignment, exc)
    return result


def unreadable_report(assignment: str, error: str) -> dict:
    exercise = get_exercise(assignment)
    return {
        "exercise": assignment,
        "score": 0,
        "max_score": exercise.max_score,
        "checks": [
            {
                "name": c.name,
                "task": c.task,
                "passed": False,
                "points": 0,
                "max_points": c.points,
                "message": f"not graded: {error}",
                "hidden": c.hidden,
                "notes": [],
            }
            for c in exercise.checks
        ],
    }


def merge_phases(public: dict, hidden: dict | None) -> dict:
    """One result, as an unsandboxed run of every check would give it: the checks in the exercise's
    order, then the skipped-check rule over the whole task (runner.credit_skipped)."""
    result = {k: v for k, v in public.items() if k not in ("phase", "hung")}
    if not public.get("readable") or hidden is None:  # not readable: no hidden phase; every check says why
        if public.get("readable"):
            raise ValueError("merge_phases: a readable submission needs its hidden phase")
        result["report"] = unreadable_report(public["assignment"], public["error"])
        return result
    exercise = get_exercise(public["assignment"])
    by_name = {c["name"]: c for phase in (public, hidden) for c in phase["report"]["checks"]}
    checks = [CheckResult(**by_name[c.name]) for c in exercise.checks if c.name in by_name]
    credit_skipped(checks)
    result["report"] = Report(exercise.id, checks).to_json()
    return result


def worker_main(assignment: str, timeout: float, world_size: int, version: str) -> int:
    """Read 'student<TAB>private copy<TAB>submitted path<TAB>token<TAB>phase<TAB>hung JSON<TAB>GPUs JSON' lines;
    send back 'token<TAB>result JSON' for each (both on the descriptors channel.take() made private). GPUs: the
    job's own (gpu_share.py), null when not shared out."""
    for line in channel.job_lines():
        student, path, shown_as, token, phase, hung, *gpus = line.rstrip("\n").split("\t")
        devices = json.loads(gpus[0]) if gpus else None
        assign_gpus(None if devices is None else tuple(str(d) for d in devices))
        result = grade_one(
            assignment, student, path or None, timeout, world_size, version, shown_as, phase, json.loads(hung)
        )
        channel.send(f"{token}\t{json.dumps(result, ensure_ascii=False)}")
    return 0
