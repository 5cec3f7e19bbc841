"""graded/<assignment>/: the parent's results, the only source of truth.

Student code runs in the ranks during `make grade` as the same OS user as the
grader, so it can write files there, for itself or a classmate. The parent
reads the results of earlier runs before any student code runs, accepts a new
result only as a message from the worker it gave the job to (never from a
file), writes the files itself, and puts back any file that differs from what
it wrote: a forged result gains nothing.
"""
from __future__ import annotations

import json
import os


def _read_all(folder: str) -> dict[str, bytes]:
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    found[name] = f.read()
            except OSError:
                continue
    return found


def encode(result: dict) -> bytes:
    return json.dumps(result, indent=1, ensure_ascii=False).encode("utf-8")


class ResultStore:
    def __init__(self, folder: str, students: list[str] | None = None):
        self.folder = folder
        self.names = None if students is None else {f"{s}.json" for s in students}  # a shard watches its own
        self.initial = self._read()  # before any student code runs
        self.expected = dict(self.initial)  # file name -> the bytes that must be there now

    def earlier(self, student: str) -> dict | None:
        """The result an earlier run stored for `student`, as read at the start."""
        data = self.initial.get(f"{student}.json")
        try:
            result = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return result if isinstance(result, dict) else None

    def accept(self, student: str, result: dict) -> None:
        """Store the grader's own result (atomically)."""
        os.makedirs(self.folder, exist_ok=True)
        name = f"{student}.json"
        data = encode(result)
        if self.expected.get(name) == data and self.forged_one(name) is False:
            return  # already there: a cached result keeps its file (and its time stamp)
        tmp = os.path.join(self.folder, f".{name}.tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(self.folder, name))
        self.expected[name] = data

    def _read(self) -> dict[str, bytes]:
        found = _read_all(self.folder)
        return found if self.names is None else {n: d for n, d in found.items() if n in self.names}

    def forged_one(self, name: str) -> bool:
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                return f.read() != self.expected.get(name)
        except OSError:
            return name in self.expected

    def forged(self) -> list[str]:
        """Result files that differ from what the grader wrote (or found at the start)."""
        now = self._read()
        return sorted(name for name in set(now) | set(self.expected) if now.get(name) != self.expected.get(name))

    def restore(self, names: list[str]) -> None:
        for name in names:
            path = os.path.join(self.folder, name)
            data = self.expected.get(name)
            if data is None:
                try:
                    os.remove(path)
                except OSError:
                    pass
            else:
                tmp = os.path.join(self.folder, f".{name}.tmp{os.getpid()}")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
