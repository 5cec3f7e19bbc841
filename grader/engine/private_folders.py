"""Folders private to the grading user: port locks, the results key.

A folder with a predictable name in a shared place (/tmp) can be created
first by someone else, or be a link to somewhere else. We create it 0700, or
accept an existing one only when it is a real folder (opened with O_NOFOLLOW)
owned by us; its mode is tightened through that descriptor, never through
the path, so no link is ever followed.
"""

from __future__ import annotations

import os
import stat
import tempfile


class UnsafeFolder(OSError):
    """str(): which folder was refused and why."""


def private_folder(path: str) -> str:
    """`path`, created 0700 if missing; refused (UnsafeFolder) if it is a link, no folder, or not ours."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafeFolder(f"cannot create {path}: {exc.strerror}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise UnsafeFolder(f"{path} is a link or not a folder: refused") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise UnsafeFolder(
                f"{path} belongs to uid {info.st_uid}, not to the grading user (uid {os.geteuid()}): refused"
            )
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def runtime_base() -> str:
    """$XDG_RUNTIME_DIR when it is ours and closed to others (systemd's /run/user/UID), else the temp folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            info = os.lstat(runtime)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022:
                return runtime
        except OSError:
            pass
    return tempfile.gettempdir()


def state_base() -> str:
    """Where state that outlives a login lives: $XDG_STATE_HOME, else ~/.local/state."""
    return os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
