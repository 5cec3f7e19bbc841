"""Grade every submission of an assignment, in parallel, outside the students' kernels.

    python -m grader grade 02_ddp_basics [--root COURSE] [--jobs N]

The authoritative score comes from the checks run on the answer cells
extracted from each submission, in fresh processes: nothing a student's code
does in its own kernel (patching the grader, hiding tracebacks, reading
NBGRADER_EXECUTION) reaches it. Each result is written atomically to
graded/<assignment>/<student>.json with the digest of what was graded, so a
re-run skips what is done (idempotent) and a run killed halfway resumes.
Worker processes are long-lived (`python -m grader _grade-worker`): each keeps
its forkserver warm across the submissions it grades.
"""
from __future__ import annotations

import hashlib
import json
import os
import selectors
import subprocess
import sys
import time

from tqdm import tqdm

from grader.checks import run_checks
from grader.engine.launcher import kill_tree
from grader.exercises import get_exercise
from grader.gradebook.course import Course
from grader.gradebook.snapshot import Snapshot
from grader.submission import SubmissionError, read_submission

SUBMISSION_BOUND_S = 900  # a whole submission, every check bounded already; this only guards the worker


def grader_digest(assignment: str) -> str:
    """Changes whenever the code that grades `assignment` changes (the engine,
    the checks framework, the exercise's checks): cached results are then stale."""
    from grader.exercises import MODULES

    base = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exercise_dir = os.path.join(base, *MODULES[assignment].split(".")[1:-1])
    sources = [os.path.join(base, name) for name in ("checks.py", "submission.py", "tolerances.py")]
    for folder in (os.path.join(base, "engine"), exercise_dir):
        sources += [os.path.join(folder, name) for name in sorted(os.listdir(folder)) if name.endswith(".py")]
    h = hashlib.sha256()
    for path in sources:
        with open(path, "rb") as f:
            h.update(path[len(base):].encode() + f.read())
    return h.hexdigest()[:16]


def in_notebook_results(data: bytes | None) -> dict[str, bool | None]:
    """What the submitted notebook's own check cells showed: task -> passed."""
    try:
        cells = json.loads(data.decode("utf-8"))["cells"]
    except Exception:
        return {}
    shown = {}
    for cell in cells if isinstance(cells, list) else []:
        grade_id = (cell.get("metadata", {}).get("nbgrader", {}) or {}).get("grade_id", "") if isinstance(cell, dict) else ""
        if not grade_id.endswith("_check") or not cell.get("outputs"):
            continue
        text = "".join("".join(o.get("text", "")) if isinstance(o.get("text"), (str, list)) else "" for o in cell["outputs"])
        error = any(o.get("output_type") == "error" for o in cell["outputs"])
        shown[grade_id[: -len("_check")]] = ("✓" in text) and ("✗" not in text) and not error
    return shown


def _write_atomic(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
    os.replace(tmp, path)


def grade_one(assignment: str, student: str, path: str | None, timeout: float, world_size: int,
              version: str, shown_as: str = "") -> dict:
    """Grade one private copy of a submission (runs in a worker process)."""
    data = None
    if path is not None:
        with open(path, "rb") as f:
            data = f.read()
    result = {"student": student, "assignment": assignment, "grader": version,
              "sha256": hashlib.sha256(data).hexdigest() if data is not None else None}
    exercise = get_exercise(assignment)
    try:
        if path is None:
            raise SubmissionError(f"no notebook named {assignment}.ipynb was submitted")
        report = run_checks(exercise, read_submission(path), world_size=world_size, timeout=timeout)
        result["readable"], result["error"] = True, None
        result["report"] = report.to_json()
    except SubmissionError as exc:
        exc = str(exc).replace(path or "", shown_as or f"{student}'s {assignment}.ipynb")
        result["readable"], result["error"] = False, exc
        result["report"] = {"exercise": assignment, "score": 0, "max_score": exercise.max_score,
                            "checks": [{"name": c.name, "task": c.task, "passed": False, "points": 0,
                                        "max_points": c.points, "message": f"not graded: {exc}", "hidden": c.hidden,
                                        "notes": []} for c in exercise.checks]}
    return result


def worker_main(assignment: str, out_dir: str, timeout: float, world_size: int, version: str) -> int:
    """Read 'student<TAB>private copy<TAB>submitted path' lines on stdin; write
    each result; print 'done student'."""
    for line in sys.stdin:
        student, path, shown_as = line.rstrip("\n").split("\t")
        result = grade_one(assignment, student, path or None, timeout, world_size, version, shown_as)
        _write_atomic(os.path.join(out_dir, f"{student}.json"), result)
        print(f"done\t{student}", flush=True)
    return 0


def cached(course: Course, assignment: str, student: str, digest: str | None, version: str) -> dict | None:
    path = os.path.join(course.results_dir(assignment), f"{student}.json")
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    return result if result.get("sha256") == digest and result.get("grader") == version else None


def grade_assignment(course: Course, assignment: str, jobs: int = 2, timeout: float = 30.0, world_size: int = 2,
                     progress: bool = True, shard: tuple[int, int] | None = None) -> dict[str, dict]:
    """Grade every collected submission (or shard (i, n): every n-th student from the i-th, in name order);
    returns student -> result."""
    get_exercise(assignment)  # an unknown assignment fails before anything starts
    submissions = course.submitted(assignment)
    if shard is not None:
        submissions = {s: submissions[s] for s in sorted(submissions)[shard[0]::shard[1]]}
    out_dir = course.results_dir(assignment)
    os.makedirs(out_dir, exist_ok=True)
    gradebook = course.db_url[len("sqlite:///"):] if course.db_url.startswith("sqlite:///") else None
    snapshot = Snapshot(list(submissions.values()) + ([gradebook] if gradebook else []))
    version = grader_digest(assignment)
    try:
        pending = [s for s, p in submissions.items() if cached(course, assignment, s, snapshot.digest(p), version) is None]
        items = [(s, snapshot.private_copy(submissions[s], f"{s}.ipynb"), submissions[s]) for s in pending]
        _run_workers(items, assignment, out_dir, jobs, timeout, world_size, progress, len(submissions), version)
        tampered = snapshot.restore_changed()
    finally:
        snapshot.close()
    results = {}
    for student, path in submissions.items():
        result = cached(course, assignment, student, snapshot.digest(path), version)
        if result is None:  # a worker died on it, or it changed while being graded
            result = {"student": student, "assignment": assignment, "readable": False, "sha256": None,
                      "error": "grading did not finish (a grader worker died on this submission)", "report": None}
        result["in_notebook"] = in_notebook_results(snapshot.content[path])
        result["flags"] = _flags(result, tampered, path, gradebook)
        results[student] = result
    return results


def _flags(result: dict, tampered: list[str], path: str, gradebook: str | None) -> list[str]:
    flags = []
    report = result.get("report") or {"checks": []}
    failed_tasks = {c["task"] for c in report["checks"] if not c["passed"]}
    for task, shown_pass in sorted(result["in_notebook"].items()):
        if shown_pass and task in failed_tasks:
            flags.append(f"the notebook shows ✓ for {task}, but the grader's own run fails it")
    if path in tampered:
        flags.append("this submission was changed while the class was graded; the original was restored")
    if gradebook in tampered:
        flags.append("the gradebook was changed while the class was graded (restored); a submission wrote to it")
    return flags


def _run_workers(items, assignment, out_dir, jobs, timeout, world_size, progress, total, version) -> None:
    if not items:
        return
    bar = tqdm(total=total, initial=total - len(items), desc=f"grading {assignment}", unit="submission",
               disable=not progress, file=sys.stderr)
    queue = list(items)
    selector = selectors.DefaultSelector()
    workers = {}

    def start_worker():
        proc = subprocess.Popen([sys.executable, "-m", "grader", "_grade-worker", assignment, "--out", out_dir,
                                 "--timeout", str(timeout), "--world-size", str(world_size),
                                 "--version", version],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                start_new_session=True)
        selector.register(proc.stdout, selectors.EVENT_READ, proc)
        workers[proc] = None
        feed(proc)

    def feed(proc):
        if queue:
            student, path, shown_as = queue.pop(0)
            workers[proc] = (student, time.monotonic())
            proc.stdin.write(f"{student}\t{path or ''}\t{shown_as}\n")
            proc.stdin.flush()
        else:
            workers[proc] = None
            proc.stdin.close()

    def stop(proc):
        selector.unregister(proc.stdout)
        del workers[proc]
        kill_tree(proc.pid)  # the worker, its forkserver and any rank still running
        proc.wait(timeout=10)

    for _ in range(min(jobs, len(queue))):
        start_worker()
    try:
        while workers:
            for key, _ in selector.select(timeout=1.0):
                proc = key.data
                line = proc.stdout.readline()
                if line.startswith("done"):
                    bar.update(1)
                    feed(proc)
                elif not line:  # the worker ended: finished, or died on a submission
                    if workers[proc] is not None:
                        bar.update(1)  # its current submission stays ungraded and is reported so
                    stop(proc)
                    if queue:
                        start_worker()
            for proc, job in list(workers.items()):
                if job and time.monotonic() - job[1] > SUBMISSION_BOUND_S:
                    stop(proc)
                    bar.update(1)
                    if queue:
                        start_worker()
    finally:
        for proc in list(workers):
            stop(proc)
        bar.close()
