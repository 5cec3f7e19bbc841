"""03_syncbn_sharded, FSDP2 in practice: export_full_state (the full state on rank 0, for export).

The ranks train the grader's FSDP2 TinyTransformer with AdamW (checks_fsdp2.sharded_fixture), then call the
student's export; the parent compares rank 0's dicts with one process training the plain model on the whole batch.

| export_full_state(model, optimizer) -> (model_state, optim_state)    | verified by                             |
|----------------------------------------------------------------------|-----------------------------------------|
| rank 0: full tensors (not DTensor shards), on the CPU                | fsdp2_export_full_state_on_rank0        |
| model_state keyed like the plain model's state_dict()                | same (keys, shapes, values)             |
| optim_state as get_optimizer_state_dict: {"state": {name: {...}},    | same ("keyed by parameter number",      |
| "param_groups": [...]}, the moments full                             | exp_avg and exp_avg_sq values)          |
| every other rank: two empty dicts                                    | same (elements held by rank >= 1)       |
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.syncbn_sharded.checks_fsdp2 import DEPTH, SEED, batch, plain_model, sharded_fixture
from grader.exercises.syncbn_sharded import EXERCISE

ADAM_STEPS, ADAM_LR = 2, 1e-2
MOMENTS = ("exp_avg", "exp_avg_sq")


def _train(model, opt, batches) -> None:
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


@lru_cache(maxsize=None)
def reference_state(depth: int, seed: int, world: int) -> tuple[dict, dict]:
    """One process, AdamW on every rank's batch: (parameters by name, {name: {moment: tensor}})."""
    model = plain_model(depth, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=ADAM_LR)
    _train(
        model,
        opt,
        [tuple(torch.cat(t) for t in zip(*(batch(s, r, 0) for r in range(world)))) for s in range(ADAM_STEPS)],
    )
    names = {p: k for k, p in model.named_parameters()}
    return (
        {k: v.detach().clone() for k, v in model.state_dict().items()},
        {names[p]: {m: s[m].clone() for m in MOMENTS} for p, s in opt.state.items()},
    )


def _describe(value):
    """What a rank sends back of one exported value: plain CPU tensors as they are, anything else by its type."""
    if type(value) is torch.Tensor:
        return {"type": "Tensor", "device": value.device.type, "tensor": value.detach().float().cpu().clone()}
    return {"type": type(value).__name__}


def _elements(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, dict):
        return sum(_elements(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_elements(v) for v in value)
    return 0


def _in_rank_export(ctx, student, depth: int, seed: int):
    model = sharded_fixture(ctx, depth, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=ADAM_LR)
    _train(model, opt, [tuple(t.to(ctx.device) for t in batch(s, ctx.rank, 0)) for s in range(ADAM_STEPS)])
    exported = student.task("export_full_state")(model, opt)
    if not isinstance(exported, tuple) or len(exported) != 2 or not all(isinstance(d, dict) for d in exported):
        return {"shape": type(exported).__name__}
    model_state, optim_state = exported
    if ctx.rank:
        return {"elements": _elements(exported)}
    state = optim_state.get("state")
    return {
        "model": {str(k): _describe(v) for k, v in model_state.items()},
        "optim_keys": sorted(str(k) for k in optim_state),
        "optim": None
        if not isinstance(state, dict)
        else {
            str(k): {m: _describe(s.get(m)) for m in MOMENTS} if isinstance(s, dict) else {} for k, s in state.items()
        },
    }


def _verify_tensor(g, got: dict, expected: torch.Tensor, what: str, likely: str) -> None:
    if got["type"] != "Tensor":
        raise CheckFailed(
            f"rank 0: {what} is a {got['type']}, not a full tensor: this rank's shard of it (a "
            "DTensor) cannot be exported. Use get_model_state_dict / get_optimizer_state_dict with "
            "options=StateDictOptions(full_state_dict=True, cpu_offload=True)"
        )
    if got["device"] != "cpu":
        raise CheckFailed(f"rank 0: {what} is on {got['device']}: export it on the CPU (cpu_offload=True)")
    if tuple(got["tensor"].shape) != tuple(expected.shape):
        raise CheckFailed(
            f"rank 0: {what} has shape {tuple(got['tensor'].shape)}, the full one is "
            f"{tuple(expected.shape)}: export the full state (full_state_dict=True), not the shards"
        )
    g.assert_close(got["tensor"], expected, f"rank 0: {what}", likely)


def verify_export(g, results, depth: int, seed: int) -> None:
    params, moments = reference_state(depth, seed, len(results))
    for rank, got in enumerate(results):
        if "shape" in got:
            raise CheckFailed(
                f"rank {rank}: export_full_state returned a {got['shape']}; return two dicts "
                "(model_state, optim_state), empty ones on ranks other than 0"
            )
    got = results[0]
    if set(got["model"]) != set(params):
        raise CheckFailed(
            f"rank 0: model_state has keys {sorted(got['model'])[:4]}...; expected the plain model's "
            f"state_dict() keys ({sorted(params)[:4]}...)"
        )
    for name, exp in params.items():
        _verify_tensor(
            g,
            got["model"][name],
            exp,
            f"model_state[{name!r}]",
            "the exported weights must be those after training, gathered from every shard",
        )
    if got["optim"] is None or "param_groups" not in got["optim_keys"]:
        raise CheckFailed(
            f"rank 0: optim_state has keys {got['optim_keys']}: return get_optimizer_state_dict's "
            "{'state': ..., 'param_groups': ...}"
        )
    if set(got["optim"]) != set(moments):
        numbered = all(k.isdigit() for k in got["optim"])
        raise CheckFailed(
            "rank 0: optim_state['state'] is "
            + (
                "keyed by parameter number (optimizer.state_dict()): get_optimizer_state_dict keys it by parameter name"
                if numbered
                else f"keyed {sorted(got['optim'])[:3]}..., expected the parameter names"
            )
        )
    for name, state in moments.items():
        for m in MOMENTS:
            _verify_tensor(
                g,
                got["optim"][name][m],
                state[m],
                f"optim_state['state'][{name!r}][{m!r}]",
                "AdamW's moments after training, full",
            )
    for rank, got in enumerate(results[1:], start=1):  # rank 0's export first: it is the one that is used
        if got["elements"]:
            raise CheckFailed(
                f"rank {rank}: holds {got['elements']} exported tensor elements: only rank 0 keeps "
                "the full state (cpu_offload=True leaves the others empty); a full copy on every rank "
                "costs each of them the whole model's memory"
            )


@EXERCISE.check("export_full_state", points=2)
def fsdp2_export_full_state_on_rank0(g):
    """After AdamW training, rank 0 exports full CPU tensors equal to one process's; the other ranks nothing."""
    verify_export(g, g.run(_in_rank_export, DEPTH, SEED), DEPTH, SEED)
