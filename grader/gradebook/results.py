"""graded/<assignment>/: the parent's results, the only source of truth.

Only the trusted grading parent writes these files; each carries a seal, an
HMAC-SHA256 of its content under a key kept in the grading user's private
state folder (~/.local/state/ddp-grader/results.key, 0600, in a 0700 folder):
  - In the sandbox, student code sees neither graded/ nor the key: it can
    forge nothing.
  - Between runs, anyone who can write graded/ but not read the grading
    user's home (a shared course folder, a classmate on the hub) cannot make
    a seal: the next run ignores a file whose seal is wrong, regrades that
    submission and flags it (a stale file of an older grader is just regraded).
  - Without the sandbox (`--no-sandbox`), student code runs as the grading
    user and can read the key. During a run the parent reads every result
    file before any student code runs, takes new results only from its own
    workers, and puts back any file that differs from what it wrote; a process
    that survives the run could still forge a sealed file afterwards. That is
    why the sandbox is the default.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile

from grader.engine.private_folders import UnsafeFolder, private_folder, state_base
from grader.gradebook.snapshot import read_plain, write_atomically

SEAL = "seal"


def key_path() -> str:
    return os.path.join(state_base(), "ddp-grader", "results.key")


def results_key() -> bytes:
    """The grading user's sealing key, created on first use. Raises UnsafeFolder when the key or its
    folder could be read or replaced by anyone else."""
    path = key_path()
    os.makedirs(os.path.dirname(os.path.dirname(path)), mode=0o700, exist_ok=True)
    private_folder(os.path.dirname(path))
    if not os.path.lexists(path):  # written whole, then linked: a concurrent run never reads half a key
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another run made it first: both use that one
        finally:
            os.remove(tmp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UnsafeFolder(f"the results key {path} is a link or cannot be read ({exc.strerror}): refused") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise UnsafeFolder(
                f"the results key {path} is not private to the grading user (owner uid "
                f"{info.st_uid}, mode {info.st_mode & 0o777:o}): refused"
            )
        key = f.read().strip()
    if len(key) < 32:
        raise UnsafeFolder(f"the results key {path} is damaged: remove it (every result is then regraded once)")
    return key


def _mac(key: bytes, result: dict) -> str:
    body = json.dumps({k: v for k, v in result.items() if k != SEAL}, sort_keys=True, ensure_ascii=False)
    return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()


def encode(result: dict, key: bytes) -> bytes:
    """The file's bytes: the result with its seal."""
    return json.dumps(dict(result, **{SEAL: _mac(key, result)}), indent=1, ensure_ascii=False).encode("utf-8")


def unseal(data: bytes | None, key: bytes) -> tuple[dict | None, bool]:
    """(the result, if its seal is the grader's; whether the file is a forgery rather than absent, unreadable
    or stale). A file that claims `version` (the current grader) without a good seal counts as forged."""
    try:
        result = json.loads(data) if isinstance(data, bytes) else None
    except ValueError:
        return None, data is not None
    if not isinstance(result, dict):
        return None, data is not None
    seal = result.get(SEAL)
    if isinstance(seal, str) and hmac.compare_digest(seal, _mac(key, result)):
        return {k: v for k, v in result.items() if k != SEAL}, False
    return None, True


def _read_all(folder: str) -> dict[str, bytes]:
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            data = read_plain(os.path.join(folder, name))
            found[name] = data if isinstance(data, bytes) else b""  # a link or FIFO: no result, but watched
    return found


def load_sealed(folder: str) -> list[dict]:
    """Every result in `folder` that carries the grader's seal (the class report reads these only)."""
    key = results_key()
    return [r for data in _read_all(folder).values() if (r := unseal(data, key)[0]) is not None]


class ResultStore:
    def __init__(self, folder: str, students: list[str] | None = None, version: str | None = None):
        self.folder = folder
        self.key = results_key()  # before any student code runs
        self.version = version
        self.names = None if students is None else {f"{s}.json" for s in students}  # a shard watches its own
        self.initial = self._read()  # before any student code runs
        self.expected = dict(self.initial)  # file name -> the bytes that must be there now
        self.unsealed: list[str] = []  # students whose stored file claims this grader but lacks its seal

    def earlier(self, student: str) -> dict | None:
        """The result an earlier run stored for `student`, as read at the start, if the grader sealed it."""
        data = self.initial.get(f"{student}.json")
        result, forged = unseal(data, self.key)
        if forged and (self.version is None or _claims(data, self.version)) and student not in self.unsealed:
            self.unsealed.append(student)
        return result

    def accept(self, student: str, result: dict) -> None:
        """Store the grader's own result (atomically)."""
        os.makedirs(self.folder, exist_ok=True)
        name = f"{student}.json"
        data = encode(result, self.key)
        if self.expected.get(name) == data and self.forged_one(name) is False:
            return  # already there: a cached result keeps its file (and its time stamp)
        write_atomically(os.path.join(self.folder, name), data)
        self.expected[name] = data

    def _read(self) -> dict[str, bytes]:
        found = _read_all(self.folder)
        return found if self.names is None else {n: d for n, d in found.items() if n in self.names}

    def forged_one(self, name: str) -> bool:
        data = read_plain(os.path.join(self.folder, name))
        return data != self.expected.get(name) if isinstance(data, bytes) or data is None else True

    def forged(self) -> list[str]:
        """Result files that differ from what the grader wrote (or found at the start)."""
        now = self._read()
        return sorted(name for name in set(now) | set(self.expected) if now.get(name) != self.expected.get(name))

    def restore(self, names: list[str]) -> None:
        for name in names:
            write_atomically(os.path.join(self.folder, name), self.expected.get(name))


def _claims(data: bytes | None, version: str) -> bool:
    """Whether a stored file says it was written by this grader (a stale one from an older grader does not)."""
    try:
        return json.loads(data).get("grader") == version
    except (ValueError, TypeError, AttributeError):
        return False
