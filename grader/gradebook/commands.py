"""python -m grader grade | report (and the hidden _grade-worker)."""

from __future__ import annotations

import argparse
import os
import sys

from grader.engine.background import sessions_end_on_signal
from grader.gradebook.course import Course


def _grade(args) -> int:
    from grader.gradebook.batch import grade_assignment
    from grader.gradebook.inject import gradebook_marks, gradebook_scores, write_results
    from grader.isolation.gpu_gate import GpuUnusable
    from grader.gradebook.preflight import NotReady
    from grader.isolation.sandbox import SandboxMissing

    course = Course(os.path.abspath(args.root))
    try:
        with sessions_end_on_signal():  # SIGTERM too unwinds to the pool's cleanup: no worker (or torchrun) stays
            results = grade_assignment(
                course,
                args.assignment,
                jobs=args.jobs,
                timeout=args.timeout,
                world_size=args.world_size,
                progress=not args.quiet,
                shard=args.shard,
                sandbox=args.sandbox,
                no_gpu=args.no_gpu,
                require_limits=args.require_job_limits,
            )
    except (NotReady, SandboxMissing, GpuUnusable) as exc:
        print(f"python -m grader grade: {exc}", file=sys.stderr)
        return 2
    if args.shard:  # a shard only fills graded/; one later run without --shard merges into the gradebook
        print(
            f"shard {args.shard[0]}/{args.shard[1]}: {len(results)} submissions graded into "
            f"{course.results_dir(args.assignment)}; merge with: python -m grader grade {args.assignment}"
        )
        return 0
    problems = write_results(course, args.assignment, results)
    scores = gradebook_scores(course, args.assignment)
    print(format_grades(results, scores, problems, gradebook_marks(course, args.assignment)))
    regrade = sorted(s for s, r in results.items() if r.get("regrade"))
    if regrade:  # the machine failed them: nobody's answer, and not a grade to keep
        print(
            f"python -m grader grade: {len(regrade)} submission(s) had checks that could not run on this machine "
            f"(GPU or process group setup; they pay nothing), regrade them: {', '.join(regrade)}",
            file=sys.stderr,
        )
        return 1
    return 0


UNSANDBOXED = (
    "graded UNSANDBOXED (--no-sandbox): student code ran as this user, with its files, environment and network"
)


def format_grades(results: dict, scores: dict, problems: dict | None = None, marks: dict | None = None) -> str:
    """The grade table: nbgrader's score, then the notes: errors, flags (FLAGGED), late penalty."""
    lines = [UNSANDBOXED] if any(r.get("sandboxed") is False for r in results.values()) else []
    plans = {s: r.get("plans") or [] for s, r in results.items()}
    every = list(dict.fromkeys(p for ps in plans.values() for p in ps))
    common = [p for p in every if all(p in ps for ps in plans.values() if ps)]
    if common:
        lines.append("ran on: " + "; ".join(common))
    lines += [f"{'student':<12} {'score':>9}  notes"]
    for student, result in sorted(results.items()):
        score, max_score = scores.get(student, (0, 0))
        mark = (marks or {}).get(student, {})
        notes = [f"late: -{mark['late_penalty']:g} (nbgrader's late penalty)"] if mark.get("late_penalty") else []
        notes += [f"FLAGGED: {f}" for f in result.get("flags", [])]
        if result.get("regrade"):
            notes.append("could not run on this machine: regrade")
        if [p for p in plans[student] if p not in common]:
            notes.append("ran on: " + "; ".join(plans[student]))
        if not result.get("readable", True) and result.get("error"):
            notes.insert(0, result["error"])
        if problems and student in problems and result.get("readable"):
            notes.append(f"nbgrader: {problems[student]}")
        lines.append(f"{student:<12} {score:>4g}/{max_score:<4g}  {'; '.join(notes)}")
    return "\n".join(lines)


def shard(text: str) -> tuple[int, int]:
    """'i/n' -> (i, n), 0 <= i < n."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard wants i/n (e.g. 0/4), not {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard {text}: i must be in 0..n-1")
    return i, n


def _report(args) -> int:
    from grader.gradebook.report import write_report

    md, png = write_report(Course(os.path.abspath(args.root)), args.assignment, args.out)
    print(f"class report: {md}\nplot: {png}")
    return 0


def _worker(args) -> int:
    from grader.gradebook.grade_job import worker_main

    return worker_main(args.assignment, args.timeout, args.world_size, args.version)


def register(sub) -> None:
    grade = sub.add_parser(
        "grade", help="autograde every collected submission of an assignment, in parallel, into nbgrader's gradebook"
    )
    grade.add_argument("assignment")
    grade.add_argument("--root", default=".", help="the course directory (default: the current one)")
    grade.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="submissions graded at once (default: one per core; with GPUs, no more than the groups "
        "of GPUs a job gets: each job has its own)",
    )
    grade.add_argument("--timeout", type=float, default=30.0, help="seconds before a run counts as hung")
    grade.add_argument("--world-size", type=int, default=2)
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    grade.add_argument(
        "--shard",
        type=shard,
        default=None,
        metavar="I/N",
        help="grade only shard I of N (into graded/, not the gradebook), e.g. one task of a "
        "Slurm job array; then run once without --shard to merge",
    )
    grade.add_argument(
        "--no-sandbox",
        dest="sandbox",
        action="store_false",
        help="grade without bubblewrap sandboxes (only for a class you trust): student code runs as "
        "you, with your files and network; the grade table and the report say so",
    )
    grade.add_argument(
        "--no-gpu",
        action="store_true",
        help="grade on CPU (gloo) even where the machine has GPUs: the ranks see none; each result's plan says so",
    )
    grade.add_argument(
        "--require-job-limits",
        action="store_true",
        help="refuse to grade where sandboxed jobs would get no cgroup of their own (no memory or CPU bound per "
        "job: not root and no delegated cgroup v2 subtree, or GRADER_JOB_CGROUPS=0); GRADER_REQUIRE_JOB_LIMITS=1 "
        "does the same",
    )
    grade.set_defaults(func=_grade)

    report = sub.add_parser("report", help="the class report of an assignment (markdown and a PNG plot)")
    report.add_argument("assignment")
    report.add_argument("--root", default=".")
    report.add_argument("--out", default=None, help="folder for the report (default: COURSE/reports)")
    report.set_defaults(func=_report)

    worker = sub.add_parser("_grade-worker")  # internal: no help, so --help does not list it
    worker.add_argument("assignment")
    worker.add_argument("--timeout", type=float, default=30.0)
    worker.add_argument("--world-size", type=int, default=2)
    worker.add_argument("--version", required=True, help="the grader digest the parent run started with")
    worker.set_defaults(func=_worker)
