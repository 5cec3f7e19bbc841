"""Files read once before any student code runs, and put back if touched.

Student code runs during grading (in the ranks) as the same OS user as the
grader, so it could write into another student's submission or into the
gradebook. We read every submission into memory first, grade from private
copies, and afterwards restore anything that changed and flag it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Snapshot:
    def __init__(self, paths: list[str]):
        self.private = tempfile.mkdtemp(prefix="grader-snapshot-")
        self.content: dict[str, bytes | None] = {}
        for path in paths:
            try:
                with open(path, "rb") as f:
                    self.content[path] = f.read()
            except OSError:
                self.content[path] = None

    def digest(self, path: str) -> str | None:
        data = self.content[path]
        return None if data is None else sha256(data)

    def private_copy(self, path: str, name: str) -> str | None:
        """A copy of what was submitted, outside the course directory."""
        data = self.content[path]
        if data is None:
            return None
        copy = os.path.join(self.private, name)
        with open(copy, "wb") as f:
            f.write(data)
        return copy

    def restore_changed(self) -> list[str]:
        """Put back every file that changed since the snapshot; return them."""
        changed = []
        for path, data in self.content.items():
            try:
                with open(path, "rb") as f:
                    now = f.read()
            except OSError:
                now = None
            if now != data:
                changed.append(path)
                if data is None:
                    os.remove(path)
                else:
                    with open(path, "wb") as f:
                        f.write(data)
        return changed

    def close(self) -> None:
        shutil.rmtree(self.private, ignore_errors=True)
