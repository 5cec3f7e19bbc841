"""Grader for the DDP course: real multi-process checks of students' code.

Layout (docs/architecture.md draws it): the top level is the core every audience uses, the packages beside it
are grouped by who uses them.

The core:
- grader.engine          the multi-process engine (run_distributed: results are data only unless trusted=True)
- grader.submission      reading a student's answers (notebook, .py file, live kernel)
- grader.checks          named, point-weighted checks and their results, declared
- grader.grading         the seam between a check and the student's code (g.run)
- grader.runner          run_checks, the one check runner
- grader.exercises       the checks of each exercise, one package per exercise
- grader.cli             python -m grader ..., the door for everyone
What students call:
- grader.notebook        check("task") and hint("task") inside a notebook
- grader.progress        show_progress()
- grader.lessons         the helpers the lessons call
What builds the course:
- grader.course          points, the exercise scaffold, the student build
- grader.translate       the course in other languages
What instructors run:
- grader.instructor      selfcheck, gpucheck, demo
- grader.gradebook       grading a class with nbgrader
- grader.isolation       where student code runs during grading
"""

from grader.engine import DistContext, RunResult, run_distributed

__all__ = ["run_distributed", "RunResult", "DistContext"]
