"""03_syncbn_sharded, HSDP: build_hsdp_model (FSDP2 on a 2-D mesh from a machine description).

Four ranks get the same seeded model and a list of nodes (which global ranks share a machine); the student builds
the mesh and shards. Each rank then runs one step on its own batch with its collectives recorded at the dispatcher,
each call with the global ranks of its process group (collectives.py). The parent compares with one process on the
whole batch and judges the groups against the nodes it handed out:

| build_hsdp_model(model, nodes, device_type)                     | verified by                                |
|-----------------------------------------------------------------|--------------------------------------------|
| every parameter a DTensor on a 2-D mesh (replicate, shard)      | hsdp_groups_follow_the_nodes               |
| all-gathers and reduce-scatters only within a node              | hsdp_groups_follow_the_nodes (per group)   |
| all-reduces only across nodes, one rank of each node per group  | hsdp_groups_follow_the_nodes (per group)   |
| gradients and parameters after an SGD step as one process's     | hsdp_step_matches_one_process              |
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_fsdp2 import full
from grader.exercises.syncbn_sharded.hsdp_groups import verify_groups, verify_sharded

# Node 0 holds ranks 0 and 2, node 1 ranks 3 and 1: neither rank order (init_device_mesh's pairs 0-1, 2-3) nor
# its transpose, so a mesh built in rank order and one with its dimensions swapped put different groups on the wire.
SPEC = {"nodes": ((0, 2), (3, 1)), "width": 8, "depth": 3, "out": 4, "rows": 4, "seed": 3, "lr": 0.5}


class HsdpNet(nn.Module):
    """A stack of Linear + Tanh blocks, then a head: every dim 0 divides by 2 and 4 (no padding)."""

    def __init__(self, width: int, depth: int, out: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.head = nn.Linear(width, out)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def plain(spec: dict) -> nn.Module:
    return HsdpNet(spec["width"], spec["depth"], spec["out"], spec["seed"])


def batch(spec: dict, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(40 + rank)
    return torch.randn(spec["rows"], spec["width"], generator=g), torch.randn(spec["rows"], spec["out"], generator=g)


@lru_cache(maxsize=None)
def reference(items: tuple, world: int) -> tuple[dict, dict]:
    """One process on the whole batch: the gradients, and the parameters after one SGD step."""
    spec = dict(items)
    model = plain(spec)
    xs, ys = zip(*(batch(spec, r) for r in range(world)))
    nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=spec["lr"]).step()
    return grads, {k: p.detach().clone() for k, p in model.named_parameters()}


def _in_rank_hsdp(ctx, student, spec: dict):
    from torch.distributed.tensor import DTensor

    model = plain(spec).to(ctx.device)
    nodes = [list(node) for node in spec["nodes"]]
    built = student.task("build_hsdp_model")(model, nodes, ctx.device.type)
    if not isinstance(built, nn.Module):
        return {"not_module": type(built).__name__}
    params = dict(built.named_parameters())
    out = {"sharded": {k: isinstance(p, DTensor) for k, p in params.items()}}
    meshes = [p.device_mesh.mesh.tolist() for p in params.values() if isinstance(p, DTensor)]
    out["mesh"] = meshes[0] if meshes else None  # only to name a likely mistake, never a verdict
    x, y = (t.to(ctx.device) for t in batch(spec, ctx.rank))
    with record_collectives() as calls:
        nn.functional.mse_loss(built(x), y).backward()
    out["calls"] = [(c.kind, c.ranks) for c in calls]
    out["grads"] = {k: None if p.grad is None else full(p.grad) for k, p in params.items()}
    torch.optim.SGD(built.parameters(), lr=spec["lr"]).step()
    out["after"] = {k: full(p) for k, p in params.items()}
    return out


def run_hsdp(g, spec: dict = SPEC) -> list:
    results = g.run(_in_rank_hsdp, spec)
    for rank, got in enumerate(results):
        if "not_module" in got:
            raise CheckFailed(f"rank {rank}: build_hsdp_model returned a {got['not_module']}, not the model")
    return results


def unsorted_rows(mesh) -> list:
    """The rows of a 2-D mesh table whose ranks are not ascending along the shard dimension."""
    if not (isinstance(mesh, list) and all(isinstance(row, list) for row in mesh)):
        return []
    return [row for row in mesh if row != sorted(row)]


def _likely_step_mistake(got: dict) -> str:
    rows = unsorted_rows(got.get("mesh"))
    if rows:
        return (
            f"your mesh lists a node's ranks as {rows[0]}, not in ascending order. A process group numbers its "
            "members in ascending rank order, so the all-gather puts each shard in another slot than the one "
            "DTensor's coordinates give it: sort each node's ranks when you build the table"
        )
    return (
        "each gradient must be the mean over all ranks' batches: averaged within the node by the reduce-scatter "
        "and across the nodes by the all-reduce, which fully_shard does when its mesh is 2-D"
    )


def verify_step(g, results, spec: dict) -> None:
    grads, after = reference(tuple(sorted(spec.items())), len(results))
    for rank, got in enumerate(results):
        likely = _likely_step_mistake(got)
        for name, exp in grads.items():
            if got["grads"].get(name) is None:
                raise CheckFailed(f"rank {rank}: {name} got no gradient")
            g.assert_close(got["grads"][name], exp, f"rank {rank}: {name}'s gradient", likely)
        for name, exp in after.items():
            g.assert_close(got["after"][name], exp, f"rank {rank}: {name} after one SGD step", likely)


@EXERCISE.check("build_hsdp_model", points=2, world_size=4)
def hsdp_groups_follow_the_nodes(g):
    """Nodes [0, 2] and [3, 1]: every all-gather and reduce-scatter on a node's ranks, every all-reduce on one
    rank of each node, counted per group over one step."""
    verify_groups(run_hsdp(g), SPEC["nodes"])


@EXERCISE.check("build_hsdp_model", points=2, world_size=4)
def hsdp_step_matches_one_process(g):
    """Gradients and parameters after one SGD step equal one process training on the 4 ranks' batches."""
    results = run_hsdp(g)
    verify_sharded(results)  # a correct step with the wrong groups still earns this check
    verify_step(g, results, SPEC)
