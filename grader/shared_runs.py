"""One launch for the checks of a submission that ask for the same run.

Several checks of a task run the same rank function with the same arguments and judge different
things in its result (save_checkpoint's three checks, train_one_epoch's three, ...). The check
runner gives every check of one submission the same SharedRuns in place of run_distributed: the
first check that asks for a run launches it, a later one with the same function, arguments,
world size, timeout and group gets a deep copy of its result (checks may mutate what they read).

Checks whose runs pass files to each other (a checkpoint saved by one run, loaded by the next) ask for a
folder by name (folder()): the same path for every check of the submission, so that their first run is the
same run, shared; close() removes the folders when the checks are done.

Only a run in which every rank reported a value, or that hung, is shared. A run that failed otherwise (a
crash, an early exit, tampering) is never reused: the next check that asks launches it again, exactly as
when every check had its own launch. A hang is shared: the same ranks running the same code would wait the
same way, so the task's other checks asking for that run are answered from it (the same message, 0 points)
instead of each waiting out a timeout of its own; a check asking for a different run still runs it.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading

import cloudpickle

from grader.engine import RunResult, run_distributed


class SharedRuns:
    """run_distributed's signature; launches counts the runs started, reused the ones answered from an earlier."""

    shares_failures = True  # takes share_failure= (Grading.run_raw asks without importing this runner-layer class)

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict[bytes, _Entry] = {}
        self.launches = 0
        self.reused = 0
        self._folders: dict[str, str] = {}
        self._closed = False

    def __call__(
        self,
        fn,
        world_size: int = 2,
        args: tuple = (),
        kwargs: dict | None = None,
        share_failure: bool = False,
        **options,
    ) -> RunResult:
        try:  # the key: what the ranks would receive, and how they would run
            key = cloudpickle.dumps(
                (fn, tuple(args), dict(kwargs or {}), world_size, sorted(options.items()), share_failure)
            )
        except Exception:
            return run_distributed(fn, world_size, args, kwargs, **options)  # raises the usual TypeError
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
        with entry.lock:  # checks side by side (a notebook): the second waits for the first's run
            if entry.result is not None:
                self.reused += 1
                return copy.deepcopy(entry.result)
            self.launches += 1
            result = run_distributed(fn, world_size, args, kwargs, **options)
            if result.ok or share_failure or result.hung:
                entry.result = copy.deepcopy(result)
            return result

    def folder(self, name: str) -> str:
        """The path the checks of this submission share under `name` (not created: the runs write it)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the checks of this submission are over: no folder is shared any more")
            if name not in self._folders:
                self._folders[name] = tempfile.mkdtemp(prefix="grader-shared-")
            return os.path.join(self._folders[name], name)

    def close(self) -> None:
        """Remove the shared folders (the checks are done, or interrupted: their runs end on their own)."""
        with self._lock:
            folders, self._folders, self._closed = list(self._folders.values()), {}, True
        for root in folders:
            shutil.rmtree(root, ignore_errors=True)


class _Entry:
    def __init__(self):
        self.lock = threading.Lock()
        self.result: RunResult | None = None
