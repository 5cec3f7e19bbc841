"""No grader process calls into CUDA before it forks ranks: a process that initialized CUDA cannot hand it on
to a fork, so one module-level torch.cuda.is_available() in a check would make every rank fail on a GPU machine
("Cannot re-initialize CUDA in forked subprocess") while a CPU machine shows nothing. GRADER_CUDA_WATCH=1
(engine/cuda.py) puts recorders on torch's CUDA entry points in every grader process; each rank reports
what its ancestors called before forking it (an at-fork hook)."""

import json
import os
import subprocess
import sys

import pytest

from grader.code_digest import grader_digest
from grader.isolation.gpu_gate import PROBE_ARGV, probe_where_graded
from tests.helpers import ROOT, needs_bwrap
from tests.graded_class import A

KERNEL = """
import json
from grader.engine import cuda_probe, processes, run_distributed
from grader.exercises import find
processes.preload(find({a!r}).public)   # what the notebook's check() does: the kernel's forkserver imports them
import grader.exercises.{pkg}  # noqa: the kernel has the exercise loaded
result = run_distributed(cuda_probe.probe_rank, 2, init_group=True, trusted=True)
print(json.dumps([v["cuda_before_fork"] for v in result.values]))
"""


@pytest.fixture
def watched(monkeypatch):
    monkeypatch.setenv("GRADER_CUDA_WATCH", "1")


def _worker_args():
    return [A, "--timeout", "30", "--world-size", "2", "--version", grader_digest(A)]


def test_the_kernels_forkserver_calls_no_cuda_before_forking_ranks(watched):
    proc = subprocess.run(
        [sys.executable, "-c", KERNEL.format(a=A, pkg="ddp_basics")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [[], []]


WHERE = [
    pytest.param(True, True, id="nursery-job", marks=pytest.mark.skipif(os.geteuid() != 0, reason="root")),
    pytest.param(True, False, id="sandboxed-grade-worker"),
    pytest.param(False, False, id="grade-worker"),
]


@needs_bwrap
@pytest.mark.parametrize("sandbox,nursery", WHERE)
def test_no_grading_process_calls_cuda_before_forking_ranks(watched, sandbox, nursery):
    """The public checks imported (in the nursery, or the worker), the forkserver forked, then a rank."""
    report = probe_where_graded(_worker_args(), sandbox, nursery)
    assert report.get("rank", {}).get("cuda_before_fork") == [], report


def test_the_watch_sees_a_planted_module_level_is_available(watched):
    """The control: a check module that calls torch.cuda.is_available() at import is caught (the test above can
    fail)."""
    from grader.exercises import find

    argv = PROBE_ARGV + list(find(A).public) + ["tests.planted.cuda_at_import"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    called = json.loads(proc.stdout.strip().splitlines()[-1])["rank"]["cuda_before_fork"]
    assert called and called[0].startswith("torch.cuda.is_available in pid"), called
