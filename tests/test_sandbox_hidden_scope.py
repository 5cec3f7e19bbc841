"""The hidden phase's sandbox holds the hidden modules of its own exercise only (grader/isolation/sandbox.py):
every other exercise's read as empty files there, as every hidden module does in the public phase.

Within one exercise the hidden modules stay readable: the one worker that runs a submission's hidden checks
imports them all, and its ranks share its mounts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from grader.exercises import discover
from grader.isolation import sandbox as sandboxes
from tests.helpers import needs_bwrap

pytestmark = [needs_bwrap]
A = "02_ddp_basics"

READ = "import json, sys; print(json.dumps({p: len(open(p).read()) for p in sys.argv[1:]}))"


def sizes_in_sandbox(masked: bool) -> dict[str, int]:
    paths = [path for package in discover().values() for path in package.hidden_files]
    # the worker's command line names the exercise, as grading_worker's and the nursery's do
    command = [sys.executable, "-c", f"import sys; sys.argv.remove({A!r}); " + READ, A, *paths]
    box = sandboxes.Sandbox(command, None, masked, 1)
    proc = subprocess.run(box.argv, env=box.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_hidden_phase_reads_only_its_own_exercises_hidden_modules():
    own = set(discover()[A].hidden_files)
    sizes = sizes_in_sandbox(masked=False)
    assert own and all(sizes[p] == os.path.getsize(p) > 0 for p in own), sizes
    others = {p: n for p, n in sizes.items() if p not in own}
    assert others and all(n == 0 for n in others.values()), others
    assert all(os.path.getsize(p) > 0 for p in others)  # on the host they are whole


def test_the_public_phase_reads_no_hidden_module():
    assert set(sizes_in_sandbox(masked=True).values()) == {0}
