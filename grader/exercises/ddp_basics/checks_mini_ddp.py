"""02_ddp_basics: MiniDDP, DDP by hand (a broadcast in __init__, gradient hooks that all-reduce), judged beside
torch's DistributedDataParallel."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from grader.checks import CheckFailed
from grader.i18n import _
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import EXERCISE


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
