"""02_ddp_basics: save_checkpoint, load_checkpoint, MiniDDP."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from grader.checks import CheckFailed
from grader.i18n import _
from grader.exercises import fences
from grader.exercises import happens_before as hb
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import EXERCISE


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
    for rank, result in enumerate(results[1:] if written_after else [], start=1):
        waited_in = fences.unfenced(result[5], written_after[0])
        if waited_in:
            raise CheckFailed(
                _(
                    "rank {rank} waited for rank 0's write only in {collectives}: {rule}. Call "
                    "dist.barrier() after the save, on every rank",
                    rank=rank,
                    collectives=fences.named(waited_in),
                    rule=fences.rule(waited_in),
                )
            )
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


# --- MiniDDP --------------------------------------------------------------------------------


class BufferNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.norm.running_mean.normal_()  # seeded: differs per rank until broadcast

    def forward(self, x):
        return self.norm(self.linear(x)).sum(dim=1, keepdim=True)


def _require_by_hand(mini) -> None:
    if isinstance(mini, DDP) or any(isinstance(m, DDP) for m in getattr(mini, "modules", lambda: [])()):
        raise CheckFailed(
            _(
                "MiniDDP is (or wraps) torch's DistributedDataParallel: the task is to build it by "
                "hand, with dist.broadcast in __init__ and gradient hooks that all-reduce"
            )
        )


def _in_rank_mini_broadcast(ctx, student):
    model = ref.seeded(BufferNet, seed=ctx.rank + 1).to(ctx.device)
    _require_by_hand(student.task("MiniDDP")(model))
    state = model.state_dict()
    return {k: v.detach().cpu().clone() for k, v in state.items()}


@EXERCISE.check("MiniDDP", points=1)
def mini_ddp_broadcasts_rank0_state(g):
    expected = ref.seeded(BufferNet, seed=1).state_dict()
    for rank, state in enumerate(g.run(_in_rank_mini_broadcast)):
        for name, value in expected.items():
            g.assert_close(
                state[name],
                value,
                _("rank {rank}'s {name} right after MiniDDP(module)", rank=rank, name=name),
                _("broadcast rank 0's parameters and buffers (dist.broadcast(t, src=0)) in __init__"),
            )


def _in_rank_mini_vs_ddp(ctx, student, factory_name, steps=5):
    factory = {"tiny": lambda: ref.tiny_net(seed=0), "frozen": ref.FrozenNet, "tied": ref.TiedNet}[factory_name]
    ddp = DDP(ref.seeded(factory, 1).to(ctx.device))
    mini = student.task("MiniDDP")(ref.seeded(factory, ctx.rank + 1).to(ctx.device))
    _require_by_hand(mini)
    inner = getattr(mini, "module", None)
    if not isinstance(inner, nn.Module):
        raise CheckFailed(_("MiniDDP has no `.module` attribute holding the wrapped model"))
    opts = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1) for m in (ddp.module, inner)]
    history = []
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + ctx.rank)  # each rank its own shard
        x, y = torch.randn(6, 4, generator=g).to(ctx.device), torch.randn(6, 1, generator=g).to(ctx.device)
        for model, opt in zip((ddp, mini), opts):
            opt.zero_grad()
            nn.MSELoss()(model(x), y).backward()
        mini.finish_gradient_synchronization()
        history.append((ref.flat_grads(ddp.module), ref.flat_grads(inner)))
        for opt in opts:
            opt.step()
    return history, ref.flat_params(ddp.module), ref.flat_params(inner)


# The public checks' four runs, in one launch (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs(
    "MiniDDP",
    (
        (_in_rank_mini_broadcast, ()),
        (_in_rank_mini_vs_ddp, ("tiny",)),
        (_in_rank_mini_vs_ddp, ("frozen",)),
        (_in_rank_mini_vs_ddp, ("tied",)),
    ),
)


def _compare_mini_to_ddp(g, factory_name):
    runs = g.run(_in_rank_mini_vs_ddp, factory_name)
    for rank, (history, ddp_params, mini_params) in enumerate(runs):
        for step, (ddp_grad, mini_grad) in enumerate(history):
            ws = g.world_size
            likely = _(
                "average the gradients: all_reduce them as backward produces them, then divide by the world size"
            )
            if g.close(mini_grad, ddp_grad * ws) and ddp_grad.abs().sum() > 0:
                likely = _(
                    "MiniDDP's gradients are world_size times DDP's: divide the all-reduced sum by the world size"
                )
            g.assert_close(
                mini_grad,
                ddp_grad,
                _(
                    "{factory_name} model, rank {rank}, step {step}: MiniDDP's gradient",
                    factory_name=factory_name,
                    rank=rank,
                    step=step,
                ),
                likely,
            )
        g.assert_close(
            mini_params,
            ddp_params,
            _("{factory_name} model, rank {rank}: parameters after 5 steps", factory_name=factory_name, rank=rank),
            _("MiniDDP must match DDP step for step"),
        )


@EXERCISE.check("MiniDDP", points=4)
def mini_ddp_matches_ddp(g):
    _compare_mini_to_ddp(g, "tiny")


@EXERCISE.check("MiniDDP", points=3, depends_on=("mini_ddp_broadcasts_rank0_state", "mini_ddp_matches_ddp"))
def mini_ddp_frozen_and_tied_parameters(g):
    try:
        _compare_mini_to_ddp(g, "frozen")
    except CheckFailed as exc:
        if "doesn't require gradient" in str(exc):
            raise CheckFailed(
                _("MiniDDP registered a gradient hook on a frozen parameter: skip parameters with requires_grad=False")
            ) from None
        raise
    _compare_mini_to_ddp(g, "tied")
