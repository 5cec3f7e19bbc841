"""Grader for the DDP course: real multi-process checks of students' code.

Layout:
- grader.engine      the multi-process engine (run_distributed)
- grader.submission  reading a student's answers (notebook, .py file, live kernel)
- grader.checks      named, point-weighted checks and how they run
- grader.exercises   the checks of each exercise, one module per exercise
- grader.notebook    check("task") inside a notebook
- grader.cli         python -m grader ...
"""
from grader.engine import DistContext, RunResult, run_distributed

__all__ = ["run_distributed", "RunResult", "DistContext"]
