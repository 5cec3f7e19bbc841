"""Linux namespace, mount and capability calls for one nursery job (nursery.py), through libc (ctypes).

Python 3.11 has no os.unshare or os.mount; these are the few calls a job needs, each failing loudly
(OSError with errno) rather than leaving a job half isolated. The recipe is the one bubblewrap and
`unshare --user --map-user --pid --fork --mount-proc --net` follow: unshare the namespaces, map one uid
(setgroups denied first, as an unprivileged process must), mount fresh tmpfs and proc from PID 1 of the
new PID namespace, bring `lo` up with SIOCSIFFLAGS, then drop every capability (bounding set first, it
needs CAP_SETPCAP) before any student byte is read.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 24, 38, 39
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {fstype or source} on {target}",
    )


def prctl(option: int, arg: int = 0) -> int:
    return _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def map_ids(uid_inside: int, uid_outside: int, gid_inside: int, gid_outside: int) -> None:
    """This process's own uid and gid, mapped into the user namespace it has just unshared."""
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid_inside} {uid_outside} 1\n"),
        ("gid_map", f"{gid_inside} {gid_outside} 1\n"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def loopback_up() -> None:
    """`ip link set lo up` in this network namespace (gloo connects over 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities(last_cap: int) -> None:
    """Every capability gone, the bounding set and ambient set included, and no way to gain one back
    (no_new_privs). last_cap: /proc/sys/kernel/cap_last_cap, read before /proc was replaced."""
    for cap in range(last_cap + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0), f"drop capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)  # EINVAL on old kernels
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
