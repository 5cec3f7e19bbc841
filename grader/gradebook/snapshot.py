"""Files read once before any student code runs, and put back if touched.

Without the sandbox, student code runs during grading (in the ranks) as the
same OS user as the grader, so it could write into another student's
submission, the gradebook (and its journal or WAL) or nbgrader_config.py. We
read every such file into memory first, grade from private copies, and
afterwards restore anything that changed and flag it. A file is read and put
back without following links, and never by opening what the student left at
the path (a FIFO would hang us, a link would send the write elsewhere): the
original is written to a fresh file beside it and renamed over the path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile

MAX_READ = 1 << 30  # a file the grader reads is a notebook or a gradebook


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


NOT_A_FILE = object()  # what read_plain returns for a link, FIFO, device or folder at the path


def read_plain(path: str) -> bytes | object | None:
    """The bytes of the regular file at `path` (no link followed), None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:  # a link (ELOOP), a folder, no permission
        return None if not os.path.lexists(path) else NOT_A_FILE
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_READ:
            return NOT_A_FILE
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_READ + 1)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes | None, mode: int = 0o644) -> None:
    """Make `path` a regular file holding `data` (None: no file) with `mode`, replacing whatever is there,
    link or not."""
    if data is None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        return
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)  # O_EXCL: never an existing file
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)  # replaces a link itself, never what it points to
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


class Snapshot:
    def __init__(self, paths: list[str]):
        self.private = tempfile.mkdtemp(prefix="grader-snapshot-")
        self.content: dict[str, bytes | None] = {}
        self.odd: set[str] = set()  # no plain file at the start (a link, a FIFO): not ours to put back
        self.modes: dict[str, int] = {}
        for path in paths:
            data = read_plain(path)
            try:
                self.modes[path] = stat.S_IMODE(os.lstat(path).st_mode)
            except OSError:
                pass
            if data is NOT_A_FILE:
                self.odd.add(path)
            self.content[path] = None if data is NOT_A_FILE else data

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
            if path in self.odd:
                continue
            now = read_plain(path)
            if now is NOT_A_FILE or now != data:
                changed.append(path)
                write_atomically(path, data, self.modes.get(path, 0o644))
        return changed

    def close(self) -> None:
        shutil.rmtree(self.private, ignore_errors=True)
