"""nbgrader's collect from the default exchange, of submissions that are who and when they say.

nbgrader's default exchange takes the student and the time from the name of a folder
in `inbound/` (`<student>+<assignment>+<timestamp>+<random>`) that any account may
create, and only warns when the folder's owner is someone else. So Bob could place a
submission named for Alice (it replaces her graded work) or one stamped earlier than it
was made (no late penalty). `VettedCollect` (nbgrader's `ExchangeFactory.collect`)
first copies each submission it can vouch for into a private staging exchange, reading
every file through a descriptor opened without following links, and refuses, with one
log line each, a submission

- with a file or folder owned by anyone but the student it names, or a link in it;
- whose files hold more than `max_submission_bytes` together (their apparent size: a sparse file of GiBs
  with no blocks on disk would become that much real data once copied);
- whose `timestamp.txt` differs from the time in its name (nbgrader grades that file);
- stamped after it was written (postdated: the time is later than its oldest ctime) or
  long before (backdated: earlier than its newest ctime by more than
  `backdate_tolerance_s`, nbgrader's own copy time). A user cannot set a ctime.

Each staged folder is 0755 and each file 0644 (nbgrader's collect copies those modes into submitted/, where a
plain collect leaves the inbound folder's 0777 for any account to swap files in). nbgrader's collect then runs on
the staging copy: the newest accepted submission of each
student, with `--update` and `--before-duedate` as usual. Used by the formgrader's
Collect button and `nbgrader collect` (the course's nbgrader_config.py and deploy/hub set it) and by `python -m grader
collect ASSIGNMENT` (grader/gradebook/collect.py).
"""

from __future__ import annotations

import os
import pwd
from fnmatch import fnmatch
import shutil
import stat
import tempfile
from datetime import datetime, timezone

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import parse_utc
from traitlets import Float, Int

from grader.gradebook.submitted_files import MAX_SUBMISSION_BYTES, shown, size_text

COLLECTED_FOLDER, COLLECTED_FILE = 0o755, 0o644  # in submitted/: only the instructor writes (plain collect: 0777)
CLOCK_SLACK_S = 2.0  # ctime comes from the kernel's coarse clock, a few ms behind the time nbgrader reads


class Refused(Exception):
    """A submission the collect step cannot vouch for; the message says why."""


def _when(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def stage(
    src: str, dest: str, student: str, backdate_tolerance_s: float, max_bytes: int = MAX_SUBMISSION_BYTES
) -> None:
    """Copy the submission folder `src` to `dest` (new) if it is `student`'s, made when its name says."""
    parts = os.path.basename(src).rsplit("+", 3)
    try:
        stamped = parse_utc(parts[2])
    except (IndexError, ValueError, OverflowError):
        raise Refused("its name carries no readable time") from None
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(f"no account is named {student!r}") from None
    copy = _OwnedCopy(student, uid, max_bytes)
    try:
        copy.folder(src, dest, "")
    except PermissionError as exc:
        raise Refused(f"it cannot be read ({exc.strerror})") from None
    _check_times(dest, stamped, copy.ctimes, backdate_tolerance_s)


class _OwnedCopy:
    """A copy of plain folders and files, each owned by the student, together at most `max_bytes` (apparent size)."""

    def __init__(self, student: str, uid: int, max_bytes: int):
        self.student, self.uid, self.max_bytes = student, uid, max_bytes
        self.room = max_bytes  # bytes the submission may still hold
        self.ctimes: list[float] = []  # when each entry last changed: the times the stamp is checked against

    def owned(self, st: os.stat_result, what: str) -> None:
        if st.st_uid != self.uid:
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = f"uid {st.st_uid}"
            raise Refused(f"{shown(what)} is owned by {owner}, not {self.student}: submitted in someone else's name")
        self.ctimes.append(st.st_ctime)

    def folder(self, src_dir: str, dest_dir: str, rel: str) -> None:
        st = os.lstat(src_dir)
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"{shown(rel) or 'the folder'} is a link or not a folder")
        self.owned(st, rel or "the folder")
        os.mkdir(dest_dir)
        os.chmod(dest_dir, COLLECTED_FOLDER)  # nbgrader's collect copies the mode into submitted/
        for entry in sorted(os.listdir(src_dir)):
            path, there, where = os.path.join(src_dir, entry), os.path.join(dest_dir, entry), os.path.join(rel, entry)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                self.folder(path, there, where)
            elif stat.S_ISREG(st.st_mode):
                self.file(path, there, where)
            else:
                raise Refused(f"{shown(where)} is a link or a special file")

    def file(self, path: str, there: str, where: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise Refused(f"{shown(where)} cannot be read ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{shown(where)} is not a plain file")
            self.owned(st, where)
            if st.st_size > self.room:
                raise Refused(
                    f"{shown(where)} is {size_text(st.st_size)} (its apparent size), more than the "
                    f"{size_text(self.max_bytes)} a submission may hold together"
                )
            with open(there, "xb") as out:
                os.fchmod(out.fileno(), COLLECTED_FILE)
                copied = _copy_at_most(f, out, self.room)
            if copied > self.room:  # it grew while copied
                raise Refused(f"{shown(where)} grew past the {size_text(self.max_bytes)} a submission may hold")
            self.room -= copied


def _check_times(dest: str, stamped: datetime, ctimes: list[float], backdate_tolerance_s: float) -> None:
    """The stamp in the folder's name, its timestamp.txt and the files' change times tell one story."""
    try:
        with open(os.path.join(dest, "timestamp.txt")) as f:
            written = parse_utc(f.read().strip())
    except (OSError, ValueError, OverflowError):
        raise Refused("its timestamp.txt is missing or unreadable") from None
    if written != stamped:
        raise Refused(f"its timestamp.txt says {_when(written)}, its name {_when(stamped)}")
    now = datetime.now(timezone.utc).timestamp()
    made, settled, at = min(ctimes), max(ctimes), stamped.timestamp()
    if at > now + CLOCK_SLACK_S:
        raise Refused(f"stamped {_when(stamped)}, in the future: postdated")
    if at > made + CLOCK_SLACK_S:
        raise Refused(f"stamped {_when(stamped)}, after it was written ({_when(_utc(made))}): postdated")
    if at < settled - backdate_tolerance_s:
        raise Refused(f"stamped {_when(stamped)}, but written at {_when(_utc(settled))}: backdated")


def _copy_at_most(src, dest, limit: int) -> int:
    """Copy up to limit + 1 bytes; return how many were copied."""
    copied = 0
    while copied <= limit:
        chunk = src.read(min(1 << 20, limit + 1 - copied))
        if not chunk:
            break
        dest.write(chunk)
        copied += len(chunk)
    return copied


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


class VettedCollect(ExchangeCollect):
    """nbgrader's collect, on a private copy of the inbound submissions that `stage` accepted."""

    max_submission_bytes = Int(
        MAX_SUBMISSION_BYTES,
        config=True,
        help="The most bytes (apparent size) one submission's files may hold together; a larger one is refused, "
        "never copied (`make grade` refuses the same under submitted/).",
    )

    backdate_tolerance_s = Float(
        300.0,
        config=True,
        help="How much older than its files a submission's time may be: nbgrader stamps the time, then copies "
        "and chmods; a backdate within this bound gains at most this much lateness.",
    )

    def init_src(self):
        inbound = os.path.join(self.root, self.coursedir.course_id, "inbound")
        if self.coursedir.course_id and os.path.isdir(inbound):
            self._staging = tempfile.mkdtemp(prefix="nbgrader-collect-")  # 0700, the instructor's
            staged = os.path.join(self._staging, self.coursedir.course_id, "inbound")
            os.makedirs(staged)
            student = self.coursedir.student_id or "*"  # nbgrader's default: every student
            for name in sorted(os.listdir(inbound)):
                parts = name.rsplit("+", 3)
                if len(parts) < 3 or parts[1] != self.coursedir.assignment_id or not fnmatch(parts[0], student):
                    continue
                try:
                    stage(
                        os.path.join(inbound, name),
                        os.path.join(staged, name),
                        parts[0],
                        self.backdate_tolerance_s,
                        self.max_submission_bytes,
                    )
                except Refused as exc:
                    shutil.rmtree(os.path.join(staged, name), ignore_errors=True)
                    self.log.error("REFUSED %s: %s", shown(name), exc)
            self.root = self._staging
            self.check_owner = False  # checked above, file by file; the staged copies are the instructor's
        super().init_src()

    def start(self):
        try:
            return super().start()
        finally:
            if getattr(self, "_staging", None):
                shutil.rmtree(self._staging, ignore_errors=True)
