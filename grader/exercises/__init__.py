"""The exercises and their checks: one package per exercise.

    grader/exercises/<name>/checks.py     the checks (and the code they run in each rank)
    grader/exercises/<name>/reference.py  single-process references and helper models
"""
from __future__ import annotations

import importlib

from grader.checks import Exercise

MODULES = {
    "01_parallelism": "grader.exercises.parallelism.checks",
    "02_ddp_basics": "grader.exercises.ddp_basics.checks",
    "03_syncbn_sharded": "grader.exercises.syncbn_sharded.checks",
    "04_torchrun": "grader.exercises.torchrun.checks",
}


class UnknownExercise(KeyError):
    pass


def get_exercise(exercise_id: str) -> Exercise:
    if exercise_id not in MODULES:
        raise UnknownExercise(f"unknown exercise {exercise_id!r}; the exercises are: {', '.join(MODULES)}")
    return importlib.import_module(MODULES[exercise_id]).EXERCISE
