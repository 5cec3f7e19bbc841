"""02_ddp_basics: pick_backend, pick_device, setup, cleanup.

Expected backends and devices come from each rank's context (the run's hardware
plan). The decision itself is also exercised in the rank under a simulated GPU
machine and a simulated CPU machine (simulated_cuda.py), so an answer that ignores
torch.cuda.is_available() fails on any hardware.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from grader.checks import CheckFailed
from grader.i18n import _
from grader.grading import describe_failure
from grader.exercises import fences
from grader.exercises import happens_before as hb
from grader.exercises.ddp_basics import EXERCISE
from grader.exercises.ddp_basics.simulated_cuda import cuda_available, device_index

HOLD_BOUND_S = 5.0  # safety bound of a held rank; a correct or wrong answer ends the wait sooner


def _attempt(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # reported as the answer's own behaviour under the simulation
        return "error", f"{type(exc).__name__}: {exc}"


# --- pick_backend ---------------------------------------------------------------------


def _in_rank_backend(ctx, student):
    pick = student.task("pick_backend")
    simulated = {}
    for available in (True, False):
        with cuda_available(available, ctx.world_size):
            simulated[available] = _attempt(pick)
    return pick(), simulated, ctx.backend


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("pick_backend", ((_in_rank_backend, ()),))


@EXERCISE.check("pick_backend", points=0.5)
def backend_matches_hardware(g):
    for rank, (backend, simulated, expected) in enumerate(g.run(_in_rank_backend)):
        if backend != expected:
            raise CheckFailed(
                _(
                    "rank {rank}: pick_backend() returned {backend!r} on this machine ({plan}), "
                    "expected {expected!r}: nccl when torch.cuda.is_available(), gloo on CPU",
                    rank=rank,
                    backend=backend,
                    plan=g.plan().describe(),
                    expected=expected,
                )
            )
        for available, want in ((True, "nccl"), (False, "gloo")):
            status, got = simulated[available]
            machine = _("a GPU machine") if available else _("a CPU-only machine")
            if status == "error":
                raise CheckFailed(
                    _(
                        "on {machine} (torch.cuda.is_available() made to return {available}), "
                        "pick_backend() raised {got}",
                        machine=machine,
                        available=available,
                        got=got,
                    )
                )
            if got != want:
                raise CheckFailed(
                    _(
                        "on {machine} (torch.cuda.is_available() made to return {available}), "
                        "pick_backend() returned {got!r}, expected {want!r}: decide with "
                        "torch.cuda.is_available(), not a fixed answer",
                        machine=machine,
                        available=available,
                        got=got,
                        want=want,
                    )
                )


# --- pick_device ----------------------------------------------------------------------


def _in_rank_device(ctx, student):
    pick = student.task("pick_device")
    simulated = {}
    for available in (True, False):
        with cuda_available(available, ctx.world_size) as set_device_calls:
            status, device = _attempt(pick, ctx.local_rank)
            simulated[available] = (status, str(device), [device_index(d) for d in set_device_calls])
    return str(pick(ctx.local_rank)), simulated, str(ctx.device), ctx.local_rank


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("pick_device", ((_in_rank_device, ()),))


@EXERCISE.check("pick_device", points=0.5)
def device_is_this_ranks(g):
    for rank, (device, simulated, expected, local_rank) in enumerate(g.run(_in_rank_device)):
        if device != expected:
            raise CheckFailed(
                _(
                    "rank {rank}: pick_device({local_rank}) returned {device} on this machine "
                    "({plan}), expected {expected}",
                    rank=rank,
                    local_rank=local_rank,
                    device=device,
                    plan=g.plan().describe(),
                    expected=expected,
                )
            )
        status, got, set_device = simulated[True]
        gpu = _(
            "on a GPU machine (torch.cuda.is_available() made to return True), pick_device({local_rank})",
            local_rank=local_rank,
        )
        if status == "error":
            raise CheckFailed(_("{gpu} raised {got}", gpu=gpu, got=got))
        if got != f"cuda:{local_rank}":
            raise CheckFailed(
                _(
                    "{gpu} returned {got}, expected cuda:{local_rank}: use the local rank as the "
                    "GPU index when torch.cuda.is_available()",
                    gpu=gpu,
                    got=got,
                    local_rank=local_rank,
                )
            )
        if local_rank not in set_device:
            raise CheckFailed(
                _(
                    "{gpu} did not call torch.cuda.set_device({local_rank}): without it every "
                    "rank's default CUDA device is GPU 0, and they pile onto it",
                    gpu=gpu,
                    local_rank=local_rank,
                )
            )
        status, got, _unused = simulated[False]
        if (status, got) != ("ok", "cpu"):
            raise CheckFailed(
                _(
                    "on a CPU-only machine pick_device({local_rank}) raised {got}: without CUDA every "
                    "rank runs on the CPU",
                    local_rank=local_rank,
                    got=got,
                )
                if status == "error"
                else _(
                    "on a CPU-only machine pick_device({local_rank}) returned {got}: without CUDA every "
                    "rank runs on the CPU",
                    local_rank=local_rank,
                    got=got,
                )
            )


# --- setup ------------------------------------------------------------------------------


def _in_rank_setup(ctx, student):
    student.task("setup")(ctx.rank, ctx.world_size, ctx.master_addr, ctx.master_port)
    if not dist.is_initialized():
        raise CheckFailed(_("after setup() there is no default process group: call dist.init_process_group"))
    seen = (dist.get_rank(), dist.get_world_size(), dist.get_backend())
    total = torch.ones(1, device=ctx.device)
    dist.all_reduce(total)  # the group really connects every rank
    dist.destroy_process_group()
    return seen + (total.item(), ctx.backend)


def _in_rank_setup_on_simulated_gpus(ctx, student):
    """setup() on a simulated GPU machine: the backend it asks for is recorded, the group
    is really formed with this machine's backend."""
    real_init, requested = dist.init_process_group, []

    def recording_init(*args, **kwargs):
        requested.append(kwargs.pop("backend", args[0] if args else None))
        return real_init(ctx.backend, *args[1:], **kwargs)

    dist.init_process_group = recording_init
    try:
        with cuda_available(True, ctx.world_size):
            student.task("setup")(ctx.rank, ctx.world_size, ctx.master_addr, ctx.master_port)
    finally:
        dist.init_process_group = real_init
    if dist.is_initialized():
        dist.destroy_process_group()
    return [str(b) for b in requested]


@EXERCISE.check("setup", points=1)
def process_group_has_right_rank_and_size(g):
    result = g.run_raw(_in_rank_setup, init_group=False)
    if not result.ok and "EADDRINUSE" in result.failure():
        raise CheckFailed(
            _(
                "two processes both tried to host the rendezvous on the master port, as only rank "
                "0 does: did every process join as rank 0? pass rank=rank to init_process_group "
                "(the port was free: the grader retried with fresh ports)"
            )
        )
    if not result.ok:
        raise CheckFailed(describe_failure(result))
    for rank, (got_rank, size, backend, total, expected_backend) in enumerate(r.value for r in result.ranks):
        if (got_rank, size) != (rank, g.world_size):
            raise CheckFailed(
                _(
                    "process {rank} joined as rank {got_rank} of {size}, expected rank {rank} of "
                    "{world_size}: pass rank= and world_size= to init_process_group",
                    rank=rank,
                    got_rank=got_rank,
                    size=size,
                    world_size=g.world_size,
                )
            )
        if backend != expected_backend:
            raise CheckFailed(
                _(
                    "the group uses {backend}, expected {expected_backend} on this machine "
                    "({plan}): use pick_backend()",
                    backend=backend,
                    expected_backend=expected_backend,
                    plan=g.plan().describe(),
                )
            )
        if total != g.world_size:
            raise CheckFailed(
                _(
                    "an all_reduce over the group summed {total:g} ones, expected {world_size}",
                    total=total,
                    world_size=g.world_size,
                )
            )
    for rank, requested in enumerate(g.run(_in_rank_setup_on_simulated_gpus, init_group=False)):
        if requested != ["nccl"]:
            raise CheckFailed(
                _(
                    "on a GPU machine (torch.cuda.is_available() made to return True), rank "
                    "{rank}'s setup() asked init_process_group for {requested}, expected ['nccl']: "
                    "pass pick_backend() as the backend, not a fixed name",
                    rank=rank,
                    requested=requested or _("nothing"),
                )
            )


# --- cleanup ----------------------------------------------------------------------------


def _in_rank_cleanup(ctx, student):
    """Happens-before evidence, no timing: the last rank enters cleanup only once rank 0 is
    blocked in a collective or has returned; rank 0 records whether the last rank had entered
    when its own cleanup returned. Without a barrier, rank 0 has provably returned first. Rank 0 also
    returns what it called: the wait must be a fence (fences.py), the last rank having entered none."""
    last = ctx.world_size - 1
    cleanup = student.task("cleanup")
    last_had_entered, entries = None, []
    if ctx.rank == last:
        hb.wait_until(lambda: hb.blocked_or_returned(ctx, [0], entered_here=0), HOLD_BOUND_S)
        hb.mark(ctx, "entered")
        cleanup()
    elif ctx.rank == 0:
        watch = hb.Collectives(ctx)
        with watch.marking(cleanup):
            cleanup()
        entries = watch.entries
        last_had_entered = hb.marked(ctx, "entered", last)
        hb.mark(ctx, "returned")
    else:
        cleanup()
    return last_had_entered, dist.is_initialized(), entries


@EXERCISE.check("cleanup", points=0.5)
def cleanup_waits_then_destroys(g):
    results = g.run(_in_rank_cleanup)
    for rank, (_unused, still_initialized, _unused) in enumerate(results):
        if still_initialized:
            raise CheckFailed(
                _("rank {rank} still has a process group after cleanup(): call dist.destroy_process_group()", rank=rank)
            )
    waited_in = fences.unfenced(results[0][2], 0)
    if waited_in:
        raise CheckFailed(
            _(
                "rank 0 waited for the other ranks only in {collectives} before "
                "destroy_process_group(): {rule}. Call dist.barrier() before destroy_process_group()",
                collectives=fences.named(waited_in),
                rule=fences.rule(waited_in),
            )
        )
    if not results[0][0]:
        raise CheckFailed(
            _(
                "rank 0 left cleanup() before rank {last} had even entered it: call "
                "dist.barrier() before destroy_process_group(), so no rank tears down while others "
                "still communicate",
                last=g.world_size - 1,
            )
        )
