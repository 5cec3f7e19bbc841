"""huge_pages.collapse(): a forking process's memory in 2 MiB pages, so that a fork copies fewer page tables."""

import os
import subprocess
import sys
import textwrap

import pytest

from grader.engine import huge_pages
from tests.helpers import ROOT

PROBE = textwrap.dedent("""
    import os, sys
    from grader.engine import huge_pages
    block = bytearray(os.urandom(1 << 20)) * 96        # 96 MiB of private memory, every page written
    collapsed = huge_pages.collapse() if sys.argv[1] == "collapse" else 0
    def huge_kib(pid):
        return int(next(l.split()[1] for l in open(f"/proc/{pid}/smaps_rollup") if l.startswith("AnonHugePages:")))
    import hashlib
    r, w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:                                        # the child: its copy of the bytes, then wait to be read
        os.close(r); os.close(hold_w)
        os.write(w, hashlib.sha256(block).digest())
        os.read(hold_r, 1)
        os._exit(0)
    os.close(w); os.close(hold_r)
    same = os.read(r, 32) == hashlib.sha256(block).digest()
    print(collapsed >> 20, huge_kib(pid) >> 10, int(same))
    os.close(hold_w); os.waitpid(pid, 0)
""")


def _probe(mode: str) -> tuple[int, int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()
    return int(out[0]), int(out[1]), out[2] == "1"


@pytest.mark.skipif(not huge_pages.enabled(), reason="this kernel has transparent huge pages off ([never])")
def test_a_collapsed_process_forks_children_with_fewer_page_tables():
    plain_mib, plain_child_huge, plain_same = _probe("plain")
    mib, child_huge, same = _probe("collapse")
    assert plain_mib == 0 and plain_same and same
    assert mib >= 64, f"only {mib} MiB of 96 were collapsed into huge pages"
    # the child maps the parent's memory in 2 MiB pages: its fork copied one entry per 2 MiB, not 512
    assert child_huge >= 64 and plain_child_huge < 8, (plain_child_huge, child_huge)


def test_collapse_never_fails_where_it_cannot_act():
    code = "from grader.engine import huge_pages; print(huge_pages.collapse() >= 0)"
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env, check=True
    )
    assert out.stdout.strip() == "True"
