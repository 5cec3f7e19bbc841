"""The students' environment on the hub: `make student` installed into a venv of its own (`make hub` runs this).

    python deploy/hub/student_env.py DEST

DEST/venv is what every student's server runs (HUB_PYTHON): the course's packages
(torch, JupyterLab, nbgrader, JupyterHub's single-user server) and the student build of
the grader (`python -m grader student-build`: public checks only, no hidden modules, no
solutions), and nothing of the instructor's course directory or environment, which stay
private to the instructor (0700). The packages are those of the Python running this
script (the instructor's venv), hard-linked when they share a file system (no second
download, no second copy on disk), without its editable install of the grader. When
that venv's interpreter lies where other accounts cannot run it (pyenv's under /root),
DEST/base is a copy of the interpreter and its standard library, and DEST/venv/bin/python
a launcher that finds the copied libpython. DEST/jupyter-config is the students' Jupyter
configuration (deploy/hub/student: the course id, the exchange, no instructor tools).
DEST is rebuilt whole on each run.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import stat
import subprocess
import sys
import sysconfig

# The instructor's install of the grader in the venv: never copied to the students' one.
INSTRUCTOR_ONLY = ("__editable__*", "ddp_course_grader-*.dist-info", "grader", "a1_coverage.pth")
CONFIG = "jupyter-config"  # DEST/jupyter-config: a copy of deploy/hub/student, readable where the course is not
STAMP = ".ddp-student-env"  # DEST holds one: a folder this script made, safe to replace


def _public(path: str) -> bool:
    """Whether any account can reach and read `path` (every folder above it searchable by others)."""
    path = os.path.realpath(path)
    if not os.stat(path).st_mode & stat.S_IROTH:
        return False
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
    return True


def _link_tree(src: str, dest: str, ignore=None) -> None:
    """A copy of `src` whose files are hard links (a copy where links cannot cross file systems)."""

    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dest, symlinks=True, copy_function=link, ignore=ignore)


def _base(dest: str) -> tuple[str, dict]:
    """The interpreter the venv runs (its folder) and the environment it needs."""
    stdlib = os.path.dirname(os.__file__)
    if _public(sys._base_executable) and _public(stdlib):
        return os.path.dirname(sys._base_executable), {}
    version = os.path.basename(stdlib)  # python3.11
    copy = os.path.join(dest, "base")
    _link_tree(
        stdlib,
        os.path.join(copy, "lib", version),
        ignore=shutil.ignore_patterns("site-packages", "test", "__pycache__"),
    )
    for lib in glob.glob(os.path.join(sys.base_prefix, "lib", "libpython*.so*")):
        shutil.copy(lib, os.path.join(copy, "lib"), follow_symlinks=True)
    os.makedirs(os.path.join(copy, "bin"))
    shutil.copy(os.path.realpath(sys._base_executable), os.path.join(copy, "bin", f"python{version[6:]}"))
    return os.path.join(copy, "bin"), {"LD_LIBRARY_PATH": os.path.join(copy, "lib")}


def build(dest: str) -> str:
    """Build DEST (replacing an earlier one); return the students' Python."""
    dest = os.path.abspath(dest)
    os.umask(0o022)  # readable by every account, writable by none (linked files keep their own modes)
    if os.path.exists(dest):
        if not os.path.exists(os.path.join(dest, STAMP)):
            raise SystemExit(f"student_env: {dest} exists and is not a student environment; not replacing it")
        shutil.rmtree(dest)
    os.makedirs(dest, 0o755)
    os.chmod(dest, 0o755)
    open(os.path.join(dest, STAMP), "w").close()
    # the students' Jupyter configuration (course id, exchange, no instructor tools): JUPYTER_CONFIG_PATH
    shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "student"), os.path.join(dest, CONFIG))
    build_dir = os.path.join(dest, "build")
    subprocess.run([sys.executable, "-m", "grader", "student-build", build_dir], check=True)

    home, env = _base(dest)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = os.path.join(dest, "venv")
    os.makedirs(os.path.join(venv, "bin"))
    with open(os.path.join(venv, "pyvenv.cfg"), "w") as f:
        f.write(f"home = {home}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n")
    interpreter = os.path.join(venv, "bin", version)
    os.symlink(os.path.join(home, version) if env else os.path.realpath(sys._base_executable), interpreter)
    _link_tree(
        sysconfig.get_paths()["purelib"],
        os.path.join(venv, "lib", version, "site-packages"),
        ignore=lambda folder, names: {n for p in INSTRUCTOR_ONLY for n in fnmatch.filter(names, p)},
    )
    for name in ("share", "etc"):  # JupyterLab's extensions, the server extensions' configuration
        if os.path.isdir(os.path.join(sys.prefix, name)):
            _link_tree(os.path.join(sys.prefix, name), os.path.join(venv, name))
    python = os.path.join(venv, "bin", "python")
    if env:  # the copied interpreter's RUNPATH points at the private original: a launcher sets the library path
        exports = "".join(f"export {k}={v}\n" for k, v in env.items())
        with open(python, "w") as f:
            f.write(f'#!/bin/sh\n{exports}exec {interpreter} "$@"\n')
        os.chmod(python, 0o755)
    else:
        os.symlink(version, python)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation", build_dir],
        check=True,
        cwd=dest,
    )
    where = subprocess.run(
        [python, "-c", "import grader; print(grader.__file__)"], capture_output=True, text=True, cwd="/", check=True
    ).stdout.strip()
    if not where.startswith(venv + os.sep):
        raise SystemExit(f"student_env: the students' Python imports the grader from {where}, not its own install")
    return python


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    print(build(sys.argv[1]))
