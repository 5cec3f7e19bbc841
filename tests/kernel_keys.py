"""Kernel keys for the tests (tests/hostile/kernel_keys.py is the student's side): a key planted by an account, the
uids that hold keys (/proc/key-users). Through the syscalls themselves (ctypes): keyutils' `keyctl` may be absent."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

PLANTED = "hostile-class-planted-key"  # the description tests/hostile/kernel_keys.py asks for
SYSCALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}  # add_key, request_key, keyctl
KEYCTL_SETPERM, KEYCTL_INVALIDATE = 5, 21
USER_KEYRING = -4
# possessor and the key's own uid may view, read, write, search, link and set attributes: what a Kerberos KEYRING:
# cache or a token store hands its own account
PERM = 0x3F3F0000

_PLANT = """
import ctypes, sys
add_key, _, keyctl = {numbers}
libc = ctypes.CDLL(None, use_errno=True)
payload = sys.argv[1].encode()
serial = libc.syscall(add_key, b"user", {desc!r}, payload, len(payload), ctypes.c_int({ring}))
assert serial > 0, ctypes.get_errno()
assert libc.syscall(keyctl, {setperm}, serial, ctypes.c_uint({perm})) == 0, ctypes.get_errno()
print(serial)
"""
_INVALIDATE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall({keyctl}, {invalidate}, int(sys.argv[1]))
"""


def _as(account: str | None, script: str, *args: str) -> subprocess.CompletedProcess:
    # /usr/bin/python3: a Python every account can run (this venv's may lie under root's private home)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    argv = [python, "-c", script, *args]
    if account is not None:
        argv = ["runuser", "-u", account, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def plant(account: str | None, secret: str) -> int:
    """A `user` key holding `secret` in the account's user keyring (root's when None); returns its serial."""
    script = _PLANT.format(
        numbers=SYSCALLS[platform.machine()],
        desc=PLANTED.encode(),
        ring=USER_KEYRING,
        setperm=KEYCTL_SETPERM,
        perm=PERM,
    )
    done = _as(account, script, secret)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def invalidate(account: str | None, serial: int) -> None:
    script = _INVALIDATE.format(keyctl=SYSCALLS[platform.machine()][2], invalidate=KEYCTL_INVALIDATE)
    _as(account, script, str(serial))


def key_users() -> dict[int, int]:
    """uid -> how many keys it holds, kernel-wide (/proc/key-users)."""
    found = {}
    with open("/proc/key-users") as f:
        for line in f:
            uid, rest = line.split(":", 1)
            found[int(uid)] = int(rest.split()[0])
    return found


def held_by_class(account: str | None, slot_uids: range) -> dict[str, int]:
    """What a class may have left in the kernel, to compare before and after a run. As root (account None): how many
    keys each slot uid holds (/proc/key-users). As an account: the keys it may view that an attacker named
    (`hostile-...`, /proc/keys read as the account); not a count of its keys, which runuser's own PAM session
    changes (pam_keyinit revokes a session keyring that lingers for the kernel's gc_delay)."""
    if account is None:
        return {str(uid): n for uid, n in key_users().items() if uid in slot_uids}
    done = subprocess.run(["runuser", "-u", account, "--", "cat", "/proc/keys"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.split()[8:]) for line in done.stdout.splitlines()]
    return {line: 1 for line in lines if line.startswith("hostile-") and not line.startswith(PLANTED)}
