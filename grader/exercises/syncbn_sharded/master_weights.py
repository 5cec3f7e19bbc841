"""Mixed precision as plan_memory's second case runs it: bf16 parameters, an optimizer of fp32 master copies.

The model's parameters, their gradients and DDP's buckets are bf16. The optimizer keeps, for each parameter it
updates, an fp32 master copy and Adam's two fp32 moments; at each step it casts the bf16 gradient to fp32 (for the
step only), updates the master copy and copies it back into the bf16 parameter. Built as an optimizer class, so that
`ZeroRedundancyOptimizer(params, MasterWeightAdam)` makes master copies of this rank's parameters only, as a ZeRO-1
with mixed precision does, and FSDP2's DTensor shards get master shards.
"""

from __future__ import annotations

import torch


class MasterWeightAdam(torch.optim.Optimizer):
    """Adam on fp32 master copies of low-precision parameters; the parameters receive the updated copies."""

    def __init__(self, params, **defaults):
        super().__init__(params, defaults)
        self.masters = {p: p.detach().float() for group in self.param_groups for p in group["params"]}
        self.inner = torch.optim.Adam(list(self.masters.values()), **defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for p, master in self.masters.items():
            master.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        for p, master in self.masters.items():
            master.grad = None  # the fp32 gradient exists only during the step
            p.copy_(master)
