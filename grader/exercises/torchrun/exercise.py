"""The exercise as its check modules import it: `EXERCISE` and `check` (declared in __init__.py)."""
from grader.exercises.torchrun import EXERCISE

check = EXERCISE.check
