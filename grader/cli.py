"""python -m grader ...

    python -m grader check EXERCISE SUBMISSION [--json] [--world-size N] [--timeout S] [--task NAME]
    python -m grader list [--json]          the exercises and their settings (the registry)
    python -m grader selfcheck              grade solutions and known-wrong submissions on this hardware
    python -m grader gpucheck               does the course's GPU path work here (a verdict a line)
    python -m grader student-build OUT_DIR  an installable grader without hidden checks or answers
    python -m grader points [ID ...] [--check]  stamp (or verify) the check cells' points from the checks
    python -m grader new-exercise ID --task NAME  scaffold an exercise: package, solution notebook, tests
    python -m grader translate [--status]   update locale/ from the English lessons, build lessons/<lang>/

Exit codes: 0 every check passed, 1 some check failed, 2 the submission (or
the command line) cannot be read.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from grader.answers_reachable import notice_once
from grader.engine.background import sessions_end_on_signal
from grader.runner import run_checks
from grader.exercises import UnknownExercise, exercise_ids, get_exercise
from grader.submission import SubmissionError, read_submission


OTHER_COMMANDS = [
    "grader.instructor.selfcheck",  # python -m grader selfcheck
    "grader.instructor.gpucheck",  # python -m grader gpucheck: the GPU path on this machine, a verdict a line
    "grader.progress",  # python -m grader progress: which tasks of which assignments pass
    "grader.gradebook.commands",  # python -m grader grade | report
    "grader.gradebook.collect",  # python -m grader collect: nbgrader collect, refusing forged submissions
    "grader.course.student_build",  # python -m grader student-build OUT_DIR: the grader for students' servers
    "grader.course.points",  # python -m grader points: the check cells' points, stamped from the checks
    "grader.course.scaffold",  # python -m grader new-exercise ID: a new exercise's package, notebook and tests
    "grader.translate.command",  # python -m grader translate [--status]: the course in es, nl, ja (locale/)
    "grader.settings",  # python -m grader config: every setting with its help
]


def _check(args) -> int:
    try:
        exercise = get_exercise(args.exercise)
        submission = read_submission(args.submission)
        if args.task:
            exercise.checks_for(args.task)
    except (SubmissionError, UnknownExercise, ValueError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    notice = notice_once()
    if notice:
        print(notice, file=sys.stderr, flush=True)
    stream = None if args.json else (lambda r: print("\n".join(r.lines()), flush=True))
    with sessions_end_on_signal():  # an interrupted check leaves no torchrun job behind (exercise 4)
        report = run_checks(
            exercise, submission, task=args.task, world_size=args.world_size, timeout=args.timeout, on_result=stream
        )
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        plans = list(dict.fromkeys(p for c in report.checks for p in c.plan.split("; ") if p))
        if plans:
            print("ran on: " + "; ".join(plans))
        print(f"score: {report.score:g}/{report.max_score:g}")
    return 0 if report.passed else 1


def _list(args) -> int:
    """The exercises as discovered (grader.exercises.discover): one line each (ids only with --ids,
    for the Makefile). A check module that fails to import stops the listing with its traceback."""
    for exercise_id in exercise_ids():
        exercise = get_exercise(exercise_id)
        if args.ids:
            print(exercise_id)
        elif args.json:
            print(
                json.dumps(
                    {
                        "id": exercise.id,
                        "notebook": exercise.notebook,
                        "tasks": exercise.tasks,
                        "max_score": exercise.max_score,
                        "side_by_side": exercise.side_by_side,
                        "judged_by_bench": exercise.judged_by_bench,
                    }
                )
            )
        else:
            tasks = f"{len(exercise.tasks)} task" + ("" if len(exercise.tasks) == 1 else "s")
            print(f"{exercise.id:<20} {tasks}, {exercise.max_score:g} points  {exercise.notebook}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grader", description="Grade DDP exercises with real multi-process runs."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run an exercise's checks on a submission")
    check.add_argument("exercise", help=f"one of: {', '.join(exercise_ids())}")
    check.add_argument("submission", help="a notebook (.ipynb; its answer cells are used) or a .py file")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument("--world-size", type=int, default=2, help="ranks per run (default 2)")
    check.add_argument("--timeout", type=float, default=30.0, help="seconds before a run counts as hung (default 30)")
    check.add_argument("--task", default=None, help="only the checks of this task")
    check.set_defaults(func=_check)
    listing = sub.add_parser("list", help="the exercises (the registry) and their settings")
    listing.add_argument("--ids", action="store_true", help="only the ids, one per line")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=_list)
    demo = sub.add_parser("demo", help="grade the bundled sample submissions and print the grades")
    demo.add_argument("--assignment", default="02_ddp_basics")
    demo.set_defaults(func=lambda args: importlib.import_module("grader.instructor.demo").main(args.assignment))
    for module in OTHER_COMMANDS:  # each module adds its own subcommand(s)
        importlib.import_module(module).register(sub)
    sub.metavar = "{" + ",".join(n for n in sub.choices if not n.startswith("_")) + "}"  # internal ones unlisted
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "world_size", 2) < 1:
        parser.error("--world-size must be at least 1")
    return args.func(args)
