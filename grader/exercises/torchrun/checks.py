"""Checks of exercise 04_torchrun: launching jobs with torchrun (lessons/04_torchrun.ipynb).

Tasks:
- read_dist_env(environ) -> DistEnv       checked on real torchrun workers against their environment
- torchrun_command(script, ...) -> list   checked by running the command it builds, on loopback
- train_script (source text)              launched with real torchrun: 2 workers, a killed worker
                                          with --max-restarts=1, two "nodes", and a snapshot probe

Student code (the functions, and `train_script` as a value) runs only in ranks
or in torchrun workers; the checks here run torchrun as subprocesses from the
parent side, each in a fresh directory, every wait bounded.
"""
# Imported in the notebook's order: each module registers its checks with EXERCISE.
from grader.exercises.torchrun import checks_env  # noqa: F401, I001
from grader.exercises.torchrun import checks_command  # noqa: F401
from grader.exercises.torchrun import checks_script  # noqa: F401
from grader.exercises.torchrun.exercise import EXERCISE
from grader.exercises.instructor import load_hidden

load_hidden(EXERCISE, __package__, ["hidden_env", "hidden_command", "hidden_script"])

__all__ = ["EXERCISE"]
