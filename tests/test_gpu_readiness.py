"""What a first GPU machine would meet before a student's code runs, tested on this CPU machine: NCCL's site
variables kept out of the sandbox's loopback-only network, a rank that never becomes ready charged to the machine,
CUDA/NCCL faults outside the student's frames charged to the machine, and the warm-up done before "ready"."""

from __future__ import annotations

import pytest

from grader.engine import launcher, machine_faults, run_distributed
from grader.engine.plan import plan_for
from grader.engine.results import RankReport, RunResult
from grader.isolation import sandbox_env

SITE_NCCL = {
    "NCCL_IB_HCA": "mlx5_0",
    "NCCL_IB_DISABLE": "0",
    "NCCL_NET": "IB",
    "NCCL_NET_PLUGIN": "aws-ofi",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_DEBUG": "INFO",
}


def test_the_sandbox_runs_nccl_on_its_loopback_and_says_so_once(monkeypatch):
    for name, value in SITE_NCCL.items():
        monkeypatch.setenv(name, value)
    env = sandbox_env.environment(masked=True)
    assert env["NCCL_SOCKET_IFNAME"] == "lo"
    assert not [n for n in env if n.startswith(("NCCL_IB_", "NCCL_NET"))], env
    assert env["NCCL_DEBUG"] == "INFO"  # what says nothing about the network is kept
    notice = sandbox_env.nccl_env_notice()
    assert notice.startswith("grader: the sandbox has only the loopback network")
    assert "NCCL_IB_HCA" in notice and "NCCL_NET_PLUGIN" in notice and "NCCL_SOCKET_IFNAME=eth0" in notice


def test_without_site_nccl_variables_nothing_is_said(monkeypatch):
    for name in [n for n in __import__("os").environ if n.startswith("NCCL_")]:
        monkeypatch.delenv(name)
    assert sandbox_env.nccl_env_notice() is None
    assert sandbox_env.environment(masked=False)["NCCL_SOCKET_IFNAME"] == "lo"


def test_a_rank_that_never_became_ready_is_the_machines_failure():
    """At the start-up bound: the rank that never said ready could not run on this machine, and its peer, ready
    and waiting on it, was stopped by that: never a hang of the student's."""
    reports = [RankReport(0), RankReport(1)]
    launcher._hung_at_deadline(reports, waiting={0, 1}, not_started={1})
    assert [r.status for r in reports] == ["stopped", "unavailable"]
    result = RunResult(reports, plan_for(2, 2), 180.0)
    assert result.unavailable and not result.hung
    assert "rank 1 could not run on this machine" in result.failure()
    assert "not set up within 180 s" in result.failure()


def test_with_every_rank_ready_a_rank_still_waited_on_hung():
    reports = [RankReport(0), RankReport(1)]
    launcher._hung_at_deadline(reports, waiting={0}, not_started=set())
    assert reports[0].status == "hung"


def fault(message: str, student_frames=(), kind: str = "RuntimeError") -> dict:
    return {"type": kind, "message": message, "student_frames": list(student_frames), "traceback": ""}


@pytest.mark.parametrize(
    "message",
    [
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO), "
        "NCCL version 2.27.3\nncclSystemError: System call (e.g. socket, malloc) or external library call failed",
        "CUDA error: uncorrectable ECC error encountered",
        "CUDA error: unspecified launch failure",
    ],
)
def test_a_cuda_or_nccl_fault_outside_the_students_frames_is_the_machines(message):
    assert machine_faults.machine_fault(fault(message))
    report = RankReport(0)
    launcher._record(report, "error", fault(message), not_started=False)
    assert report.status == "unavailable"


def test_the_same_fault_in_the_students_code_or_of_their_making_is_theirs():
    message = "CUDA error: unspecified launch failure"
    assert not machine_faults.machine_fault(fault(message, ["<cell 3>, line 4, in step: x.sum()"]))
    assert not machine_faults.machine_fault(fault(f"invalid literal for int(): '{message}'", kind="ValueError"))
    report = RankReport(0)
    launcher._record(report, "error", fault("rank 0: expected 3.0, got 4.0"), not_started=False)
    assert report.status == "error"


def _warm_and_ready(ctx):
    from grader.engine import worker

    return worker.warmed_at, worker.ready_at


def test_the_warm_up_runs_before_ready(monkeypatch):
    """GPU plans warm up (a matmul, a collective, a barrier) before "ready"; GRADER_WARM_UP=1 makes a gloo run do
    the same, so that the order is checked here, in real ranks."""
    monkeypatch.setenv(launcher.WARM_UP_ENV, "1")
    result = run_distributed(_warm_and_ready, 2, timeout=60, trusted=True)
    assert result.ok, result.failure()
    for warmed, ready in result.values:
        assert warmed is not None and ready is not None and warmed <= ready
    monkeypatch.delenv(launcher.WARM_UP_ENV)
    result = run_distributed(_warm_and_ready, 2, timeout=60, trusted=True)
    assert result.ok, result.failure()
    assert all(warmed is None and ready is not None for warmed, ready in result.values)  # CPU plans: no warm-up


def test_a_gpu_group_whose_nccl_failed_stops_grading_before_any_student():
    """The gate's probe runs each GPU group's NCCL all_reduce and barrier (engine/cuda_probe.py); one that failed
    refuses to grade, in one line naming the GPUs and what to do."""
    from grader.isolation import gpu_gate

    probed = {
        "groups": [
            {"devices": ["0", "1"], "ok": True, "error": None},
            {"devices": ["2", "3"], "ok": False, "error": "rank 1 could not run on this machine: ncclSystemError"},
        ]
    }
    with pytest.raises(gpu_gate.GpuUnusable) as raised:
        gpu_gate._require_nccl(probed, sandbox=True, nursery=True)
    text = str(raised.value)
    assert "NCCL failed on GPUs 2,3 in a nursery's job" in text and "--no-gpu" in text and "\n" not in text
    gpu_gate._require_nccl({"groups": probed["groups"][:1]}, sandbox=True, nursery=True)  # all ok: no error


def test_the_probe_is_told_the_jobs_shape():
    from grader.exercises import get_exercise
    from grader.isolation import gpu_gate

    widest = max(c.world_size or 0 for c in get_exercise("02_ddp_basics").checks)
    assert gpu_gate.job_shape(["02_ddp_basics", "--world-size", "2"]) == [2, max(2, widest)]


def test_without_gpus_the_probe_runs_no_nccl_group():
    from grader.engine import cuda_probe

    assert cuda_probe.nccl_groups(0, (2, 3), timeout=30) == []


def test_in_exclusive_process_mode_notebook_checks_go_one_at_a_time(monkeypatch, tmp_path):
    """GRADER_FAKE_EXCLUSIVE=1 and GRADER_FAKE_GPUS=2 stand for a machine whose GPUs are in exclusive-process mode:
    a notebook's checks then run one at a time, under the machine's lock, which a second notebook cannot take."""
    import fcntl
    import os

    from grader import notebook
    from grader.engine import gpu_exclusive
    from grader.engine.cuda import cuda_devices

    monkeypatch.setattr(gpu_exclusive.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setenv("GRADER_FAKE_GPUS", "2")
    cuda_devices.cache_clear()
    gpu_exclusive.exclusive_process.cache_clear()
    try:
        assert not notebook.exclusive_gpus()
        monkeypatch.setenv(gpu_exclusive.FAKE_ENV, "1")
        gpu_exclusive.exclusive_process.cache_clear()
        assert notebook.exclusive_gpus()
        with gpu_exclusive.one_at_a_time(True):
            other = os.open(gpu_exclusive.lock_path(), os.O_RDONLY)  # another notebook's kernel
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(other)
        other = os.open(gpu_exclusive.lock_path(), os.O_RDONLY)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released once the check is done
        os.close(other)
    finally:
        cuda_devices.cache_clear()
        gpu_exclusive.exclusive_process.cache_clear()
