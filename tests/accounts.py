"""Real local accounts for the class tests (tests/test_hub.py, tests/test_exchange.py): root only.

useradd/userdel, commands run as a user (runuser), every process of the accounts killed at
the end, and the Pythons the accounts run: the students' environment (deploy/hub/student_env.py,
what `make hub` builds) and the instructor's (this venv, reachable by the instructor alone).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import stat
import subprocess
import sys

from tests.servers import kill_all

HERE = os.path.dirname(os.path.abspath(__file__))
STUDENT_ENV = os.path.join(os.path.dirname(HERE), "deploy", "hub", "student_env.py")


def missing() -> str:
    """Why these tests cannot run here ('' when they can)."""
    if os.geteuid() != 0:
        return "needs root: it creates real local accounts (useradd) and runs commands as them"
    if not shutil.which("useradd") or not shutil.which("runuser"):
        return "no useradd/runuser on this machine"
    return ""


def as_user(user: str, *cmd: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", *cmd], capture_output=True, text=True, timeout=timeout, **kw)


def exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def kill_user_processes(users) -> None:
    """Every process still running as one of the accounts (their servers, kernels, ranks), by pid."""
    import psutil

    uids = {pwd.getpwnam(u).pw_uid for u in users if exists(u)}
    kill_all([p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real in uids])


def home(user: str) -> str:
    return os.path.expanduser(f"~{user}")


@contextlib.contextmanager
def accounts(users, password: str | None = None):
    """Fresh accounts with private (0700) homes; removed, with everything they ran, at the end."""
    try:
        for user in users:  # a run killed earlier may have left them
            if exists(user):
                kill_user_processes([user])
                subprocess.run(["userdel", "-r", user], capture_output=True, timeout=60)
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", user], check=True, timeout=60)
            os.chmod(home(user), 0o700)  # Debian's default home is world-readable
            if password:
                subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True, timeout=60)
        yield users
    finally:
        kill_user_processes(users)
        for user in users:
            subprocess.run(["userdel", "-r", user], capture_output=True, timeout=60)


def student_env(dest: str) -> str:
    """The students' Python, built as `make hub` builds it; returns its path."""
    done = subprocess.run([sys.executable, STUDENT_ENV, dest], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def instructor_python(folder: str) -> str:
    """This venv for an account that is not root, in `folder` (put it where only the instructor reaches it): a venv
    that borrows this venv's packages (the instructor's grader, hidden modules included). When this interpreter lies
    under a private home (pyenv in /root), the venv runs a copy of it (binary, libpython, standard library) whose
    library path is rewritten to the copy's own lib/ ($ORIGIN): a plain interpreter, which the grading sandbox runs as
    is (it drops LD_LIBRARY_PATH with the rest of the environment). Returns the venv's python."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = os.path.realpath(sys._base_executable)
    if not _public(interpreter):
        interpreter = _copy_interpreter(os.path.join(folder, "base"), version)
    venv = os.path.join(folder, "venv")
    os.makedirs(os.path.join(venv, "bin"))
    os.makedirs(os.path.join(venv, "lib", version))
    with open(os.path.join(venv, "pyvenv.cfg"), "w") as f:
        f.write(f"home = {os.path.dirname(interpreter)}\ninclude-system-site-packages = false\n")
    python = os.path.join(venv, "bin", "python")
    os.symlink(interpreter, python)
    os.symlink(
        os.path.join(sys.prefix, "lib", version, "site-packages"), os.path.join(venv, "lib", version, "site-packages")
    )
    for name in ("share", "etc"):  # JupyterLab's extensions and the server extensions' configuration
        os.symlink(os.path.join(sys.prefix, name), os.path.join(venv, name))
    with open(os.path.join(venv, "bin", "alembic"), "w") as f:  # nbgrader's gradebook runs `alembic` from PATH
        f.write(f'#!/bin/sh\nexec {python} -c "import sys; from alembic.config import main; sys.exit(main())" "$@"\n')
    os.chmod(os.path.join(venv, "bin", "alembic"), 0o755)
    return python


def _copy_interpreter(copy: str, version: str) -> str:
    stdlib = os.path.dirname(os.__file__)
    shutil.copytree(
        stdlib,
        os.path.join(copy, "lib", version),
        symlinks=True,
        ignore=shutil.ignore_patterns("site-packages", "test", "__pycache__", "config-*"),
    )
    for lib in glob.glob(os.path.join(sys.base_prefix, "lib", "libpython*.so*")):
        shutil.copy(lib, os.path.join(copy, "lib"), follow_symlinks=True)
    os.makedirs(os.path.join(copy, "bin"))
    binary = os.path.join(copy, "bin", version)
    with open(os.path.realpath(sys._base_executable), "rb") as f:
        elf = f.read()
    old, new = os.path.join(sys.base_prefix, "lib").encode() + b"\0", b"$ORIGIN/../lib\0"
    if old in elf:  # the RUNPATH string in .dynstr, overwritten in place (no longer than before)
        assert elf.count(old) == 1 and len(new) <= len(old), "cannot rewrite the interpreter's library path"
        elf = elf.replace(old, new.ljust(len(old), b"\0"))
    with open(binary, "wb") as f:
        f.write(elf)
    os.chmod(binary, 0o755)
    return binary


def _public(path: str) -> bool:
    """Whether every account can reach and run `path`."""
    path = os.path.realpath(path)
    while path != "/":
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        path = os.path.dirname(path)
    return True
