"""02_ddp_basics: save_checkpoint, load_checkpoint (MiniDDP: checks_mini_ddp.py)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from grader.checks import CheckFailed
from grader.i18n import _, N_
from grader.exercises import fences
from grader.exercises import happens_before as hb
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import EXERCISE

UNFENCED = N_(
    "rank {rank} waited for rank 0's write only in {collectives}: {rule}. Call "
    "dist.barrier() after the save, on every rank"
)


# --- checkpoints ----------------------------------------------------------------------------

HOLD_BOUND_S = 5.0  # safety bound of rank 0's held write; a correct or wrong answer ends the wait sooner


def _read_state(path: str):
    """The checkpoint as {key: tensor}, or None when there is no complete, readable file."""
    if not os.path.exists(path):
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None
    return state if isinstance(state, dict) else {}


def _in_rank_save(ctx, student):
    """Rank 0's torch.save is a slow disk made deterministic: it writes only once every other rank
    is blocked in a collective or has returned. A rank that returns without waiting for the write
    has then provably looked for the file before it existed (happens_before.py). Rank 0 also returns how many
    collectives it had entered when it wrote, and each rank what it called: the wait must be a fence (fences.py)."""
    path = os.path.join(ctx.workdir, "ckpt.pt")
    real_save, writes, written_after = torch.save, [], []
    others = range(1, ctx.world_size)

    def held_save(obj, f, *args, **kwargs):
        writes.append(ctx.rank)
        if ctx.rank == 0:
            written_after.append(watch.entered)
            hb.wait_until(lambda: hb.blocked_or_returned(ctx, others, watch.entered), HOLD_BOUND_S)
        return real_save(obj, f, *args, **kwargs)

    model = ref.ddp_fixture(ref.tiny_net(seed=3), ctx.device)
    save = student.task("save_checkpoint")
    watch = hb.Collectives(ctx)
    torch.save = held_save
    try:
        with watch.marking(save):
            save(model, path)
    finally:
        torch.save = real_save
    complete_at_return = _read_state(path) is not None
    hb.mark(ctx, "returned")
    dist.barrier()  # ours: now rank 0 has written, whatever the answer did
    state = _read_state(path)
    keys = None if state is None else list(state)
    expected = {k: v.detach().cpu() for k, v in model.module.state_dict().items()}
    missing = torch.empty(0)  # on the CPU: compared with the file, read with map_location="cpu"
    holds_model = (
        state is not None
        and len(state) == len(expected)
        and all(
            torch.is_tensor(v) and torch.equal(v, expected.get(k.removeprefix("module."), missing))
            for k, v in state.items()
        )
    )
    return len(writes), complete_at_return, keys, holds_model, written_after[:1], watch.entries


def _require_model_state(results) -> None:
    keys, holds_model = results[0][2:4]
    if keys is None:
        raise CheckFailed(
            _(
                "no readable checkpoint was written at the given path: torch.save the model's "
                "state_dict to `path` on rank 0"
            )
        )
    if not holds_model:
        raise CheckFailed(
            _(
                "the checkpoint (keys {keys}) is not the model's state_dict: save "
                "model.module.state_dict(), the parameters and buffers of the wrapped model",
                keys=keys[:4],
            )
        )


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("save_checkpoint", ((_in_rank_save, ()),))


@EXERCISE.check("save_checkpoint", points=1)
def checkpoint_written_by_rank0_only(g):
    results = g.run(_in_rank_save)
    writes = [r[0] for r in results]
    if sum(writes) != 1 or writes[0] != 1:
        writers = [r for r, w in enumerate(writes) if w]
        raise CheckFailed(
            _(
                "torch.save was called by rank(s) {writers}, {calls} time(s) in all: every rank "
                "holds the same model, so only rank 0 (dist.get_rank() == 0) should write",
                writers=writers,
                calls=sum(writes),
            )
        )
    _require_model_state(results)


@EXERCISE.check("save_checkpoint", points=1)
def checkpoint_has_unwrapped_keys(g):
    results = g.run(_in_rank_save)
    _require_model_state(results)
    keys = results[0][2]
    expected = list(ref.tiny_net(seed=0).state_dict().keys())
    if keys != expected:
        hint = (
            _("the keys start with 'module.': save model.module.state_dict(), the unwrapped model's")
            if keys and all(k.startswith("module.") for k in keys)
            else _("save model.module.state_dict()")
        )
        raise CheckFailed(
            _(
                "the checkpoint's keys are {keys}..., expected {expected}...: {hint}",
                keys=keys[:4],
                expected=expected[:4],
                hint=hint,
            )
        )


@EXERCISE.check("save_checkpoint", points=1)
def checkpoint_complete_before_return(g):
    results = g.run(_in_rank_save)
    _require_model_state(results)
    written_after = results[0][4]
    if written_after:
        fences.require_fenced([(rank, r[5]) for rank, r in enumerate(results) if rank], written_after[0], UNFENCED)
    for rank, result in enumerate(results):
        if not result[1]:
            raise CheckFailed(
                _(
                    "rank {rank} returned from save_checkpoint before rank 0 had finished writing: "
                    "call dist.barrier() after the save, on every rank",
                    rank=rank,
                )
            )


def _in_rank_load(ctx, student):
    path = os.path.join(ctx.workdir, "ckpt.pt")
    if ctx.rank == 0:
        torch.save(ref.tiny_net(seed=7).state_dict(), path)  # on the CPU: a checkpoint file, loaded with map_location
    dist.barrier()
    real_load, calls = torch.load, []

    def recording_load(*args, **kwargs):
        calls.append(kwargs.get("map_location", args[1] if len(args) > 1 else None))
        return real_load(*args, **kwargs)

    model = ref.tiny_net(seed=0).to(ctx.device)
    torch.load = recording_load
    try:
        student.task("load_checkpoint")(model, path, ctx.device)
    finally:
        torch.load = real_load
    return ref.flat_params(model), calls, str(next(model.parameters()).device)


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("load_checkpoint", ((_in_rank_load, ()),))


@EXERCISE.check("load_checkpoint", points=0.5)
def checkpoint_loads_onto_device(g):
    expected = ref.flat_params(ref.tiny_net(seed=7))
    for rank, (params, calls, device) in enumerate(g.run(_in_rank_load)):
        if not calls:
            raise CheckFailed(_("load_checkpoint did not call torch.load"))
        if calls[0] is None:
            raise CheckFailed(
                _(
                    "torch.load was called without map_location: a checkpoint saved from cuda:0 "
                    "would load onto GPU 0 on every rank; pass map_location=device"
                )
            )
        g.assert_close(
            params,
            expected,
            _("rank {rank}'s parameters after load_checkpoint", rank=rank),
            _("load the file's state_dict into the model with model.load_state_dict"),
        )
