"""What may lie under submitted/: plain folders and plain files of a bounded size, nothing else.

Plain `nbgrader collect` copies an exchange folder with its links: a submission folder linked to a classmate's
would be graded as its own, and an extra file linked to /etc/shadow would be copied, as the grader's user, into
autograded/ and feedback/ (nbgrader's converters follow links). A hard link to a file outside its submission is
the same, without the arrow. A FIFO or a device would hang or hurt whatever reads it, and a sparse file of a few
GiB (no blocks on disk) becomes that much real data once copied. So `make grade` refuses a submission holding any
of these before it reads anything of it (preflight.py): the rest of the class is graded, the odd one is flagged
with one line saying why. `make collect` refuses them in the exchange (vetted_collect.py). Light: os only.
"""

from __future__ import annotations

import os
import stat

MAX_SUBMISSION_BYTES = 100 << 20  # apparent size of one submission's files together: notebooks with plots fit
MAX_SHOWN = 5  # problems named in the one refusal line; the rest are counted


def shown(text: str, limit: int = 120) -> str:
    """A student-chosen name as one printable line: escapes instead of control characters, and bounded."""
    text = text if text.isprintable() else ascii(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "…"


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _kind(mode: int) -> str | None:
    """What a non-plain entry is, in words; None for a folder or a regular file."""
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return {
        stat.S_IFLNK: "a symbolic link",
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a device",
        stat.S_IFBLK: "a device",
    }.get(stat.S_IFMT(mode), "a special file")


def found(base: str, max_bytes: int = MAX_SUBMISSION_BYTES) -> list[tuple[str, str]]:
    """(path relative to `base`, what is wrong with it in words) for each thing under `base` (a course's
    submitted/) that grading must not read. A submission is base/<student>/<assignment>/; nothing is followed
    or opened."""
    out: list[tuple[str, str]] = []
    if not os.path.lexists(base):
        return out
    if _kind(os.lstat(base).st_mode) or not os.path.isdir(base):
        return [("", f"{shown(base)} is {_kind(os.lstat(base).st_mode) or 'not a folder'}")]
    names: dict[tuple[int, int], list[str]] = {}  # (dev, inode) of files with more than one name -> those names
    sizes: dict[str, int] = {}  # submission -> apparent size of its files
    biggest: dict[str, tuple[int, str]] = {}

    def unreadable(exc: OSError) -> None:
        rel = os.path.relpath(exc.filename, base)
        out.append((rel, f"{shown(rel)} cannot be read ({exc.strerror})"))

    for folder, dirs, files in os.walk(base, onerror=unreadable):
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, base)
            info = os.lstat(path)
            kind = _kind(info.st_mode)
            if kind == "a symbolic link":
                out.append((rel, f"{shown(rel)} is a symbolic link (to {shown(os.readlink(path), 200)})"))
            elif kind:
                out.append((rel, f"{shown(rel)} is {kind}"))
            elif stat.S_ISREG(info.st_mode):
                submission = os.path.join(*rel.split(os.sep)[:2])
                sizes[submission] = sizes.get(submission, 0) + info.st_size
                biggest[submission] = max(biggest.get(submission, (-1, "")), (info.st_size, rel))
                if info.st_nlink > 1:
                    names.setdefault((info.st_dev, info.st_ino), []).append(rel)
    for (dev, ino), rels in names.items():
        submission = {os.path.join(*rel.split(os.sep)[:2]) for rel in rels}
        if len(submission) > 1 or os.lstat(os.path.join(base, rels[0])).st_nlink > len(rels):
            out += [(rel, f"{shown(rel)} is a hard link to a file outside its submission") for rel in rels]
    for submission, total in sorted(sizes.items()):
        if total > max_bytes:
            size, rel = biggest[submission]
            out.append(
                (
                    submission,
                    f"{shown(submission)} holds {size_text(total)} of files ({shown(rel)}: {size_text(size)}), "
                    f"more than the {size_text(max_bytes)} a submission may hold",
                )
            )
    return out


def problems(base: str, max_bytes: int = MAX_SUBMISSION_BYTES) -> list[str]:
    """Each thing under `base` that grading must not read, in words, by its path relative to `base`."""
    return [why for _, why in found(base, max_bytes)]


def refused_submissions(base: str, assignment: str, max_bytes: int = MAX_SUBMISSION_BYTES) -> dict[str, str]:
    """student -> the one line saying why nothing of their submission of `assignment` under `base` (submitted/)
    may be read; a student's own folder that is odd (a link) refuses that student. Other assignments' folders
    are not this run's. Raises NotAFolder when `base` itself is odd: then nothing may be read."""
    by_student: dict[str, list[str]] = {}
    for rel, why in found(base, max_bytes):
        parts = rel.split(os.sep) if rel else []
        if not parts:
            raise NotAFolder(f"{why}. Nothing was graded")
        if len(parts) == 1 or parts[1] == assignment:
            by_student.setdefault(parts[0], []).append(why)
    lines = {}
    for student, whys in by_student.items():
        more = f"; and {len(whys) - MAX_SHOWN} more" if len(whys) > MAX_SHOWN else ""
        lines[student] = (
            f"nothing of this submission was read: {'; '.join(whys[:MAX_SHOWN])}{more} (collect it again with "
            "`make collect`, which refuses these, and grade again)"
        )
    return lines


class NotAFolder(Exception):
    """submitted/ itself is a link or not a folder; str() says so in one line."""
