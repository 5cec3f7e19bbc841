"""The multi-process engine, with real processes and a real gloo group."""

import os
import subprocess
import sys
import time

import psutil
import pytest
import torch

from grader.engine import current_plan, run_distributed, warm_up

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() >= 2,
    reason="CPU-only: these runs send CPU tensors through the default plan's group; with 2+ GPUs that is nccl, which refuses them (tests/test_teardown_and_gpu.py and tests/test_plan.py cover nccl)",
)


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture(scope="module", autouse=True)
def forkserver():
    warm_up()


def _sum_ranks(ctx):
    import torch.distributed as dist

    t = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(t)
    return {"rank": ctx.rank, "world": ctx.world_size, "device": str(ctx.device), "sum": t, "backend": ctx.backend}


def test_results_come_back_from_every_rank():
    result = run_distributed(_sum_ranks, world_size=3)
    assert result.ok, result.failure()
    assert [v["rank"] for v in result.values] == [0, 1, 2]
    plan = current_plan(3)  # gloo on CPU unless 3 GPUs are visible
    assert [v["device"] for v in result.values] == [plan.device(r) for r in range(3)]
    assert all(v["world"] == 3 and v["backend"] == plan.backend for v in result.values)
    assert all(torch.equal(v["sum"], torch.tensor([6.0])) for v in result.values)


def test_function_defined_at_runtime_is_sent_by_value():
    scale = 7  # a closure over a local: does not pickle by reference

    def local_fn(ctx):
        return ctx.rank * scale

    assert run_distributed(local_fn, world_size=2).values == [0, 7]


def _crash_on_rank1(ctx):
    import torch.distributed as dist

    if ctx.rank == 1:
        raise ValueError("bad shapes in my code")
    dist.barrier()  # rank 0 would wait forever for rank 1


def test_crash_reports_traceback_and_stops_other_ranks_at_once():
    start = time.monotonic()
    result = run_distributed(_crash_on_rank1, world_size=2, timeout=60)
    assert time.monotonic() - start < 10, "the surviving rank was not stopped at once"
    assert not result.ok
    assert result.ranks[1].status == "error" and result.ranks[0].status == "stopped"
    text = result.failure()
    assert "rank 1 raised ValueError: bad shapes in my code" in text
    assert "in your code" in text and "_crash_on_rank1" in text


def _collective_only_on_rank0(ctx):
    import torch.distributed as dist

    if ctx.rank == 0:
        dist.all_reduce(torch.ones(1))
    return "done"


def test_hang_is_killed_within_timeout_with_the_hung_ranks_stack():
    start = time.monotonic()
    result = run_distributed(_collective_only_on_rank0, world_size=2, timeout=3)
    elapsed = time.monotonic() - start
    assert elapsed < 3 + 5, f"took {elapsed:.1f} s for a 3 s timeout"
    assert result.ranks[0].status == "hung" and result.ranks[1].status == "ok"
    text = result.failure()
    assert "rank 0 hung: waiting in all_reduce" in text
    assert "_collective_only_on_rank0" in text


def _exits_early(ctx):
    if ctx.rank == 0:
        os._exit(3)
    return 1


def _sys_exit(ctx):
    sys.exit(4)


def _hangs_with_a_grandchild(ctx, pid_dir):
    child = subprocess.Popen(["sleep", "600"])
    with open(os.path.join(pid_dir, f"grandchild{ctx.rank}"), "w") as f:
        f.write(str(child.pid))
    time.sleep(600)


def test_early_exit_and_sys_exit_are_reported():
    result = run_distributed(_exits_early, world_size=2)
    assert result.ranks[0].status == "exited" and result.ranks[0].exitcode == 3
    assert "exited with code 3" in result.failure()
    result = run_distributed(_sys_exit, world_size=2)
    assert "SystemExit" in result.failure()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_no_process_is_left_behind_after_failing_runs(tmp_path):
    before = descendants()
    for fn in [_crash_on_rank1, _collective_only_on_rank0, _exits_early] * 2:
        assert not run_distributed(fn, world_size=2, timeout=2).ok
    assert not run_distributed(_hangs_with_a_grandchild, world_size=2, args=(str(tmp_path),), timeout=2).ok
    # run_distributed returns after it has killed and reaped its ranks: nothing to wait for
    leftover = {p for p in descendants() - before if _alive(p)}
    assert not leftover, f"processes left behind: {[psutil.Process(p).cmdline() for p in leftover]}"
    grandchildren = [int(p.read_text()) for p in tmp_path.glob("grandchild*")]
    assert len(grandchildren) == 2, "the ranks did not start their grandchildren"
    assert not [p for p in grandchildren if _alive(p)], "a grandchild started by a rank survived the run"


def _abort_after_reporting(ctx, pid_file):
    import threading

    if ctx.rank == 0:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
        # teardown noise: this rank dies with SIGABRT after it has reported
        threading.Timer(0.3, os.abort).start()
    else:
        # report only once rank 0 has died: its abort certainly came after its report
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(pid_file) and not _alive(int(open(pid_file).read() or 0)):
                break
            time.sleep(0.05)
    return ctx.rank


def test_abort_after_reporting_is_a_note_not_a_failure(tmp_path):
    result = run_distributed(_abort_after_reporting, world_size=2, args=(str(tmp_path / "rank0.pid"),))
    assert result.ok and result.values == [0, 1]
    assert any("SIGABRT" in note for note in result.notes), result.notes


def _ddp_step(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(ctx.rank)
    model = DDP(torch.nn.Linear(8, 8))
    model(torch.randn(4, 8)).sum().backward()
    return model.module.weight.grad.clone()


def test_ddp_runs_are_immune_to_teardown_noise():
    """30 DDP runs in a row: every one reports identical gradients on both ranks."""
    for _ in range(30):
        result = run_distributed(_ddp_step, world_size=2, timeout=30)
        assert result.ok, result.failure()
        assert torch.equal(result.values[0], result.values[1])


def test_unpicklable_function_is_a_clear_error():
    import threading

    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot send"):
        run_distributed(lambda ctx: lock, world_size=1)


def test_bad_world_size():
    with pytest.raises(ValueError):
        run_distributed(_sum_ranks, world_size=0)


class _RunsCodeWhenUnpickled:
    def __reduce__(self):
        return (os.system, ("touch /tmp/grader-pwned",))


def _returns_a_pickle_bomb(ctx):
    return _RunsCodeWhenUnpickled()


def test_untrusted_ranks_cannot_run_code_in_the_grader():
    if os.path.exists("/tmp/grader-pwned"):
        os.remove("/tmp/grader-pwned")
    result = run_distributed(_returns_a_pickle_bomb, world_size=1, trusted=False)
    assert not result.ok and "refuses to load" in result.failure()
    assert not os.path.exists("/tmp/grader-pwned")


def test_two_graders_are_never_handed_the_same_port():
    """Concurrent graders (make grade's workers, two kernels) each get ports the other is not handed."""
    # each prints its ports, then holds them until the test closes its stdin: the two overlap for sure
    code = (
        "import sys\nfrom grader.engine import free_port\n"
        "print(' '.join(str(free_port()) for _ in range(200)), flush=True)\nsys.stdin.read()"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        ports = [set(map(int, p.stdout.readline().split())) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    assert all(len(p) == 200 for p in ports), "one process was handed a port twice"
    assert not ports[0] & ports[1], f"both graders were handed {sorted(ports[0] & ports[1])[:5]}"


def test_reserved_port_is_released_after_its_block():
    """A port reserved for one run is locked during it, and free for other graders after it."""
    from grader.engine import reserved_port
    from grader.engine.processes import _lock_port, _unlock, lock_folder

    with reserved_port() as port:
        assert _lock_port(port, lock_folder()) is None, "another grader could take the port while it is in use"
    held = _lock_port(port, lock_folder())
    assert held is not None, "the port's lock was kept after the block: other graders cannot use it"
    _unlock(*held)
    assert not os.path.exists(os.path.join(lock_folder(), str(port))), "a released port's lock file was left"
