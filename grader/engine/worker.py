"""The child side of a run: one OS process per rank.

Each rank: becomes the leader of its own process group (so the launcher can
kill it with everything it started), sends its stdout/stderr to a file, arms
faulthandler so the launcher can ask for its Python stack, joins the process
group, runs the function, and reports the result *before* any teardown.
Then it waits for the launcher's release and leaves with os._exit(0): no
destructor of a gloo process group ever runs, so teardown noise (SIGABRT, a
thread join that never returns in ~ProcessGroupGloo) cannot touch a result.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import io
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import cloudpickle

from grader.engine import frame_guard, integrity, stacks


@dataclass(frozen=True)
class DistContext:
    """What one rank is told about itself."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: "object"  # torch.device
    master_addr: str
    master_port: int
    workdir: str
    guard: "object" = None  # integrity.Guard in untrusted runs: the check runner verifies with it


@dataclass(frozen=True)
class RankSpec:
    """Everything the launcher hands one rank (pickled by multiprocessing)."""

    rank: int
    world_size: int
    backend: str
    device: str  # "cuda:r" or "cpu", from the run's hardware plan
    hide_gpus: bool  # fewer GPUs than ranks: the rank sees none (CUDA_VISIBLE_DEVICES="")
    visible: str | None  # else this grading job's own GPUs (CUDA_VISIBLE_DEVICES), None: as inherited
    guard: bool  # untrusted code runs: watch it for tampering (integrity.Guard)
    init_group: bool
    master_addr: str
    master_port: int
    store_path: str
    workdir: str
    output_path: str
    stack_path: str
    payload: bytes
    timeout: float
    launcher_pid: int
    threads: int
    # The parent's language variables at launch (grader/i18n.py), None where unset: a rank's messages follow the
    # caller's language now, not the one its forkserver inherited when it started.
    language: tuple[tuple[str, str | None], ...] = ()
    warm_up: bool = False  # a matmul, a collective and a barrier before "ready" (_warm_up): a GPU plan's runs


# When this rank finished its warm-up and said ready (time.monotonic()), for tests/test_gpu_readiness.py to read.
warmed_at: float | None = None
ready_at: float | None = None


def encode(message) -> bytes:
    """torch.save, so the launcher can load it with weights_only=True: a rank
    running untrusted code can send data, never code to run in the grader."""
    import torch

    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def decode(data: bytes, trusted: bool):
    import torch

    return torch.load(io.BytesIO(data), weights_only=not trusted)


def _redirect_output(path: str) -> None:
    # fd-level, so C++ output (gloo, abort messages) is captured too.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")


def _watch_launcher(spec: RankSpec) -> None:
    """Kill this rank's whole process group if the launcher dies or the run
    outlives any reasonable bound: no process is ever left behind."""
    hard_deadline = time.monotonic() + spec.timeout + 300.0  # the launcher's startup bound (180 s) included
    while True:
        time.sleep(0.5)
        try:
            os.kill(spec.launcher_pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
        if not alive or time.monotonic() > hard_deadline:
            try:
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(137)


# The group's own timeout lies well beyond the run's: the launcher's bound always fires first, so a hang
# reaches the check as a hang with every rank's stack, never as gloo's "Timed out waiting ...ms" in one rank.
GROUP_TIMEOUT_MARGIN_S = 60.0  # below _watch_launcher's hard deadline (timeout + 300 s)


def _init_process_group(spec: RankSpec, torch, dist, device) -> None:
    store = dist.FileStore(spec.store_path, spec.world_size)
    dist.init_process_group(
        spec.backend,
        store=store,
        rank=spec.rank,
        world_size=spec.world_size,
        timeout=timedelta(seconds=max(spec.timeout, 1.0) + GROUP_TIMEOUT_MARGIN_S),
        **({"device_id": device} if device.type == "cuda" else {}),  # NCCL sets up now, before the clock starts
    )


def _warm_up(torch, dist, device) -> None:
    """First-use costs paid before "ready", off the student's clock: cuBLAS's handle (a matmul), NCCL's first
    collective and a barrier, waited for on the GPU."""
    global warmed_at
    a = torch.ones(8, 8, device=device)
    (a @ a).sum()
    dist.all_reduce(torch.ones(1, device=device))
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    warmed_at = time.monotonic()


def _dumpable() -> None:
    """NVIDIA's driver renames its threads through /proc/self/task/<tid>/comm in cuInit, and a non-dumpable
    process's /proc files belong to root: a rank is dumpable again (what a grading worker hides from student
    code lives in the worker, which stays non-dumpable; the ranks of one run are the same student's code)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def main(spec: RankSpec, conn) -> None:
    """Entry point of every rank (runs in a child of the forkserver)."""
    _become_rank(spec)
    # Bound now, before student code runs: a later swap of these names changes nothing here.
    send, describe, exit_now, encode_ = conn.send_bytes, stacks.describe_exception, os._exit, encode
    try:  # the machine's part: a failure here is never the student's (launcher: "could not run on this machine")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(spec.threads)
        device = torch.device(spec.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if spec.init_group:
            _init_process_group(spec, torch, dist, device)
            if spec.warm_up:
                _warm_up(torch, dist, device)
    except BaseException as exc:
        _report_and_leave(("unavailable", describe(exc)), send, conn, encode_, exit_now)
    global ready_at
    ready_at = time.monotonic()
    send(encode_(("ready", None)))  # the launcher's timeout starts now: the device and the group are set up
    ctx = DistContext(
        rank=spec.rank,
        local_rank=spec.rank,
        world_size=spec.world_size,
        backend=spec.backend,
        device=device,
        master_addr=spec.master_addr,
        master_port=spec.master_port,
        workdir=spec.workdir,
    )
    _report_and_leave(_run_payload(spec, ctx, describe, encode_), send, conn, encode_, exit_now)


def _become_rank(spec: RankSpec) -> None:
    """The process as a rank: its own process group, its output in a file, its stack on request, its
    environment (GPUs, language, torch.distributed's variables) and working folder."""
    try:
        os.setsid()
    except OSError:
        pass
    _redirect_output(spec.output_path)
    stack_file = open(spec.stack_path, "w")
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    threading.Thread(target=_watch_launcher, args=(spec,), daemon=True).start()

    if spec.hide_gpus:  # before anything here touches CUDA: the student's `torch.cuda.is_available()` is then False
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif spec.visible is not None:  # this job's own GPUs, seen as cuda:0..
        os.environ["CUDA_VISIBLE_DEVICES"] = spec.visible
    _dumpable()
    for name, value in spec.language:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.environ.update(
        MASTER_ADDR=spec.master_addr,
        MASTER_PORT=str(spec.master_port),
        RANK=str(spec.rank),
        LOCAL_RANK=str(spec.rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_WORLD_SIZE=str(spec.world_size),
        GRADER_WORKER="1",
    )
    os.chdir(spec.workdir)


def _run_payload(spec: RankSpec, ctx: DistContext, describe, encode_) -> bytes:
    """Run the check's function in this rank; the encoded ("ok", value) or ("error", description)."""
    guard = None
    try:
        fn, args, kwargs = cloudpickle.loads(spec.payload)
        if spec.guard:
            guard = integrity.Guard()
            frame_guard.install()  # before the answers load: their frame walks are refused
            ctx = dataclasses.replace(ctx, guard=guard)
        try:
            value = fn(ctx, *args, **kwargs)
        finally:
            if guard is not None:
                guard.verify("while it was checked")
        try:
            return encode_(("ok", value))
        except Exception as exc:
            raise TypeError(f"the value returned by rank {spec.rank} could not be sent back: {exc}") from None
    except BaseException as exc:  # SystemExit, KeyboardInterrupt and integrity.Tampered too
        return encode_(("error", describe(exc)))


def _report_and_leave(message, send, conn, encode_, exit_now) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        send(message if isinstance(message, bytes) else encode_(message))
        conn.recv()  # the release: every rank has reported (or the launcher gave up)
    except BaseException:
        pass
    exit_now(0)
