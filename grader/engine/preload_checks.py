"""The forkserver's second preload: every exercise's public checks, never the hidden ones.

Imported before any student code runs in a rank, so the integrity guard knows them (and a
check's first run does not pay the import). The hidden modules are not: a rank of a hidden
check imports its module when it unpickles the check, before any student code runs; a rank
of a public check never has them. Only the forkserver imports this (processes.py): in any
other process, an exercise imported here would stay without its hidden checks.
"""
import importlib
import os

from grader.exercises import MODULES
from grader.exercises.instructor import MASKED_ENV

_masked = os.environ.get(MASKED_ENV)
os.environ[MASKED_ENV] = "1"  # instructor.load_hidden imports no hidden module
try:
    for _module in MODULES.values():
        importlib.import_module(_module)
finally:
    if _masked is None:
        del os.environ[MASKED_ENV]
    else:
        os.environ[MASKED_ENV] = _masked
