"""The notebook's first cell starts the forkserver before the kernel imports torch, and
leaves the kernel's own warm-up (torch._dynamo) for after the first check.

Both processes import torch (about 2 s each here); started together they share the two
cores, one after the other they add up, and the first check waits for the sum
(measured by benchmarks/bench_notebook.py). No rank is launched here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

ROOT = __file__.rsplit("/tests/", 1)[0]

PROBE = textwrap.dedent("""
    import sys
    from multiprocessing import forkserver

    import grader.notebook
    assert "torch" not in sys.modules, "importing grader.notebook imported torch"

    seen = []

    class WatchTorch:  # notes whether the forkserver was running when this process first imported torch
        def find_spec(self, name, path=None, target=None):
            if name == "torch" and not seen:
                seen.append(forkserver._forkserver._forkserver_pid is not None)
            return None

    sys.meta_path.insert(0, WatchTorch())
    check = grader.notebook.checker("01_parallelism")
    print("forkserver running at the kernel's torch import:", seen)
    assert seen == [True], seen
    # the kernel's own warm-up (torch._dynamo and friends) waits for the first check's end: until then
    # the cores are the forkserver's, which the first check waits for
    assert grader.notebook._warming is None, "checker() started the kernel's warm-up"
""")


def test_first_cell_starts_the_forkserver_before_importing_torch():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "forkserver running at the kernel's torch import: [True]" in done.stdout
