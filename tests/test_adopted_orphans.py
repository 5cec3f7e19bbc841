"""A double fork with setsid escapes kill_tree: the grading parent adopts such orphans
(Linux's child subreaper) while it grades, and kills those still running when it is done."""

import os
import subprocess
import sys

import psutil

from grader.engine.processes import adopting_orphans

ESCAPE = (
    "import os, sys\npid = os.fork()\nif pid == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
    "    os._exit(0)\nos.waitpid(pid, 0)\n"
)


def _alive(marker: str) -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


def test_an_orphan_left_by_a_double_fork_is_adopted_and_killed():
    marker = f"adopted-orphan-{os.getpid()}"
    keep = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with adopting_orphans():
            subprocess.run([sys.executable, "-c", ESCAPE, marker], check=True, timeout=60, start_new_session=True)
            escaped = _alive(marker)
            assert len(escaped) == 1 and escaped[0].ppid() == os.getpid(), "the orphan was not adopted"
        assert not _alive(marker), "the orphan outlived the block"
        assert keep.poll() is None, "a child from before the block was killed"
    finally:
        for p in _alive(marker):
            p.kill()
        keep.stdin.close()
        keep.wait(timeout=30)
