"""Grader for the DDP course: real multi-process checks of students' code.

Layout:
- grader.engine      the multi-process engine (run_distributed: results are data only unless trusted=True)
- grader.submission  reading a student's answers (notebook, .py file, live kernel)
- grader.checks      named, point-weighted checks and their results, declared
- grader.grading     the seam between a check and the student's code (g.run)
- grader.runner      run_checks, the one check runner
- grader.exercises   the checks of each exercise, one package per exercise
- grader.notebook    check("task") inside a notebook
- grader.cli         python -m grader ...
"""

from grader.engine import DistContext, RunResult, run_distributed

__all__ = ["run_distributed", "RunResult", "DistContext"]
