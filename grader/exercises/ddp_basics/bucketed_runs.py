"""What a rank of BucketedDDP's checks runs (checks_bucketed.py): two training steps of the student's wrapper beside
torch's DDP, with the student's collectives recorded per phase (construction, forward, backward, finish).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import reference_practice as rp
from grader.i18n import _

STEPS = 2


def require_by_hand(mini) -> None:
    if isinstance(mini, DDP) or any(isinstance(m, DDP) for m in getattr(mini, "modules", list)()):
        raise CheckFailed(
            _(
                "BucketedDDP is (or wraps) torch's DistributedDataParallel: build it by hand, with "
                "gradient hooks that fill buckets and all-reduce each one asynchronously"
            )
        )


class _Phases:
    """The student's calls, each recorded at the dispatcher (only those: torch's DDP next to them runs unwatched,
    which halves the cost). `calls` collects (phase, kind, nbytes, async_op); `live` is the current phase's list."""

    def __init__(self, record: bool):
        self.record, self.calls, self.live = record, [], []

    def run(self, phase: str, fn, *args):
        if not self.record:
            return fn(*args)
        with record_collectives() as self.live:
            result = fn(*args)
        self.calls += [(phase, c.kind, c.nbytes, c.async_op) for c in self.live]
        self.live = []
        return result


def _bucketed_history(ctx, student, name, cap_mb, record):
    """Two training steps of the student's BucketedDDP next to torch's DDP. The ranks start from different
    weights (seed 1 + rank): only rank 0's, broadcast at construction, give DDP's gradients."""
    factory, features = rp.MODELS[name], rp.IN_FEATURES[name]
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = DDP(
        ref.seeded(factory, 1 + ctx.rank).to(ctx.device),
        device_ids=device_ids,
        find_unused_parameters=(name == "unused"),
    )
    module = ref.seeded(factory, 1 + ctx.rank).to(ctx.device)
    phases = _Phases(record)
    first_ready: list[int] = []  # how many collectives backward had made when the first layer's gradient was ready
    first = next(p for p in module.parameters() if p.requires_grad)
    first.register_post_accumulate_grad_hook(lambda p: first_ready.append(len(phases.live)))  # before the student's
    mini = phases.run("init", student.task("BucketedDDP"), module, cap_mb)
    require_by_hand(mini)
    # on the CPU: copies, compared with the wrapper's after its broadcast
    params, buffers = rp.initial_state(module, buffers=False), rp.initial_state(module, params=False)
    kept = getattr(mini, "module", None) is module
    opts = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1) for m in (ddp.module, module)]
    steps = []
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(100 * step + ctx.rank)
        x, y = torch.randn(6, features, generator=gen), torch.randn(6, 1, generator=gen)
        x, y = x.to(ctx.device), y.to(ctx.device)
        for opt in opts:
            opt.zero_grad()
        nn.MSELoss()(ddp(x), y).backward()
        phases.calls = []
        loss = nn.MSELoss()(phases.run("forward", mini, x), y)
        phases.run("backward", loss.backward)
        phases.run("after backward", mini.finish_gradient_synchronization)
        steps.append(
            {
                "ddp": ref.flat_grads(ddp.module),
                "grad": ref.flat_grads(module),
                "calls": phases.calls,
                "before_first": first_ready[-1] if first_ready else None,
            }
        )
        for opt in opts:
            opt.step()
    return {"params": params, "buffers": buffers, "kept": kept, "steps": steps}


def in_rank_bucketed(ctx, student, configs, record=True):
    """Each (model name, bucket_cap_mb) in one run; record: the collectives too."""
    return [_bucketed_history(ctx, student, name, cap_mb, record) for name, cap_mb in configs]
