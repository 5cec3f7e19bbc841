"""pipeline_schedule: what travels between the stages, against one process (parent side).

One process runs each microbatch through the model layer by layer and keeps every layer's output and the gradient
of that microbatch's loss with respect to it. The model is cut into 2 * p stages dealt round-robin (interleaved.py).
Each tensor a rank sends must be, in the interleaved schedule's order, the output of the last layer of one of its
stages for one microbatch (to the rank of the next stage), or the gradient of the output of the layer before one of
its stages (to the rank of the previous stage), up to one positive factor (torch's schedules send the gradient of
each microbatch's loss and scale the parameters' gradients afterwards; a hand-written schedule may divide each loss
by the number of microbatches first: the task's text does not say which).

And each rank must have read the parameters of its own stages' layers only (stage_watch.StageWatch): a rank that
runs the whole model, one contiguous block of it, or another split, is told which layers it ran.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.parallelism.interleaved import describe, expected_sends, stages_of


def layer_model(seed: int, widths: list[int]) -> nn.Sequential:
    """Linear layers of the given widths with Tanh between them: len(widths) - 1 linear layers."""
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def batch(seed: int, n: int, widths: list[int]):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(n, widths[0], generator=g), torch.randn(n, widths[-1], generator=g)


def stage_layers(n_layers: int, stage: int, n_stages: int) -> list[int]:
    return torch.tensor_split(torch.arange(n_layers), n_stages)[stage].tolist()


def rank_layers(n_layers: int, rank: int, world_size: int) -> list[int]:
    """The layers of rank's stages: stages rank, rank + world_size, ... of 2 * world_size."""
    stages = stages_of(rank, world_size)
    return [i for stage in stages for i in stage_layers(n_layers, stage, len(stages) * world_size)]


def layer_outputs(seed, widths, n, m) -> dict:
    """Per microbatch: every layer's output, and the gradient of the microbatch's loss with respect to it."""
    model = layer_model(seed, widths)
    x, y = batch(seed, n, widths)
    outputs, grads = [], []
    for a, b in zip(x.tensor_split(m), y.tensor_split(m)):
        h, kept = a, []
        for layer in model:
            h = layer(h)
            h.retain_grad()
            kept.append(h)
        nn.MSELoss()(h, b).backward()
        outputs.append([t.detach() for t in kept])
        grads.append([t.grad for t in kept])
    return {"outputs": outputs, "grads": grads}


def _with_params(model: nn.Sequential) -> set[int]:
    return {i for i, layer in enumerate(model) if any(True for _ in layer.parameters())}


def _span(layers: list[int]) -> str:
    return f"layers {layers}" if len(layers) > 1 else f"layer {layers[0]}"


def check_layers_used(used_per_rank: list, widths: list[int]) -> None:
    """Each rank read the parameters of its own stages' layers, and of no other."""
    model = layer_model(0, widths)
    world_size, weighted = len(used_per_rank), _with_params(model)
    for rank, used in enumerate(used_per_rank):
        mine = rank_layers(len(model), rank, world_size)
        foreign = sorted(set(used) - set(mine))
        if not foreign:
            continue
        holds = (
            f"rank {rank} holds stages {rank} and {rank + world_size} of {2 * world_size}, {_span(mine)} "
            f"(torch.tensor_split(torch.arange(len(model)), 2 * world_size) gives the stages' layers)"
        )
        if weighted <= set(used):
            raise CheckFailed(
                f"rank {rank} ran every layer of the model (it read the parameters of layers {foreign}, which "
                f"belong to other ranks' stages); {holds}. A rank that runs the whole model is not a pipeline: "
                "each stage runs its own layers and sends its activations to the next"
            )
        block = torch.tensor_split(torch.arange(len(model)), world_size)[rank].tolist()
        if weighted & set(used) <= set(block):
            raise CheckFailed(
                f"rank {rank} ran one contiguous block of the model, {_span(block)}: a single stage per rank, or "
                f"its two stages side by side (stages {2 * rank} and {2 * rank + 1}). The interleaved schedule "
                f"deals the stages round-robin, so that each microbatch goes round the ranks twice: {holds}"
            )
        raise CheckFailed(f"rank {rank} ran layers {foreign}, which belong to other ranks' stages; {holds}")


def check_stages_built(stages_per_rank: list, widths: list[int]) -> None:
    """The torch PipelineStages each rank built ([index, number of stages, first layer, last layer]), where it built
    any: two per rank, stages r and r + p of 2p, each over its own layers."""
    world_size, n_layers = len(stages_per_rank), len(layer_model(0, widths))
    n_stages = 2 * world_size
    for rank, stages in enumerate(stages_per_rank):
        if not stages:
            continue  # a hand-written schedule, or stages of copies: the layers and messages tell
        indices, want = [stage[0] for stage in stages], stages_of(rank, world_size)
        counts = {stage[1] for stage in stages}
        if len(stages) == 1:
            raise CheckFailed(
                f"rank {rank} built a single stage (stage {indices[0]} of {stages[0][1]}): an interleaved schedule "
                f"gives each rank 2, so the model is cut into 2 * world_size = {n_stages} stages and rank {rank} holds "
                f"stages {want[0]} and {want[1]}. One stage per rank is §4.3's GPipe or 1F1B, with its larger bubble"
            )
        if counts != {n_stages}:
            raise CheckFailed(
                f"rank {rank} built stages of {sorted(counts)} in all; with 2 stages per rank there are "
                f"2 * world_size = {n_stages}"
            )
        if indices == [2 * rank, 2 * rank + 1] and indices != want:
            raise CheckFailed(
                f"rank {rank} built stages {indices}, side by side: the interleaved schedule deals the stages "
                f"round-robin (stage s runs on rank s % world_size), so rank {rank} holds stages {want[0]} and "
                f"{want[1]}, and each microbatch goes round the ranks twice"
            )
        if indices != want:
            raise CheckFailed(f"rank {rank} built stages {indices}; it holds stages {want[0]} and {want[1]}")
        for index, _, first, last in stages:
            layers = stage_layers(n_layers, index, n_stages)
            if [first, last] != [layers[0], layers[-1]]:
                raise CheckFailed(
                    f"rank {rank}'s stage {index} holds layers {first} to {last}; stage {index} of {n_stages} is "
                    f"{_span(layers)}: torch.tensor_split(torch.arange(len(model)), {n_stages})[{index}]"
                )


def _want(reference: dict, n_layers: int, n_stages: int, kind: str, stage: int, microbatch: int) -> torch.Tensor:
    """What one send should carry: the stage's output (F), or the gradient of the stage's input (B)."""
    layers = stage_layers(n_layers, stage, n_stages)
    if kind == "F":
        return reference["outputs"][microbatch][layers[-1]]
    return reference["grads"][microbatch][layers[0] - 1]


def _matches(g, sent: torch.Tensor, want: torch.Tensor, kind: str) -> bool:
    """Equal (an activation), or equal up to one positive factor (a gradient)."""
    if sent.shape != want.shape:
        return False
    if kind == "F":
        return g.close(sent, want)
    factor = float(sent.flatten() @ want.flatten() / (want.flatten() @ want.flatten()).clamp_min(1e-30))
    return factor > 0 and g.close(sent, factor * want)


def _what_it_was(g, sent, peer, rank, world_size, m, reference, n_layers) -> str:
    """A diagnosis of a send that is not the one the schedule has at that point."""
    if not sent.abs().sum():
        return "zeros: send what the stage's own layers computed for that microbatch"
    others = [(peer_, k, s, i) for r in range(world_size) for peer_, k, s, i in expected_sends(r, world_size, m)]
    for peer_, kind, stage, microbatch in others:
        if _matches(g, sent, _want(reference, n_layers, 2 * world_size, kind, stage, microbatch), kind):
            where = f" to rank {peer}" if peer == peer_ else f" to rank {peer}, not rank {peer_}"
            return (
                f"{describe(kind, stage, microbatch)}{where}: the interleaved schedule runs its stages' forwards and "
                "backwards in its own order (ScheduleInterleaved1F1B's); a stage ran out of turn, or on the wrong rank"
            )
    return "not what its stages' layers compute from any microbatch: send each stage's own output, in order"


def _check_rank_traffic(g, rank, sent, reference, world_size, n_layers, n) -> None:
    m = len(reference["outputs"])
    wants = expected_sends(rank, world_size, m)
    for k, (peer, tensor) in enumerate(sent):
        if k >= len(wants):
            raise CheckFailed(
                f"rank {rank} sent more than the {len(wants)} tensors the interleaved schedule sends there (2 "
                f"stages per rank, {m} microbatches: an activation after each forward but the last stage's, a "
                "gradient after each backward but the first stage's)"
            )
        want_peer, kind, stage, microbatch = wants[k]
        want = _want(reference, n_layers, 2 * world_size, kind, stage, microbatch)
        if peer == want_peer and _matches(g, tensor, want, kind):
            continue
        if tensor.dim() and want.dim() and tensor.shape[0] != want.shape[0]:
            raise CheckFailed(
                f"rank {rank} sent microbatches of {tensor.shape[0]} rows, where {n} rows in {m} microbatches make "
                f"{want.shape[0]}: pass n_microbatches to the schedule as it was given (not n_microbatches - 1 "
                "nor the number of ranks), so that each microbatch is rows i of x.tensor_split(n_microbatches)"
            )
        what = _what_it_was(g, tensor, peer, rank, world_size, m, reference, n_layers)
        raise CheckFailed(
            f"rank {rank}'s message {k + 1} should be {describe(kind, stage, microbatch)} (rank {want_peer}); it was "
            f"{what}"
        )
    if len(sent) < len(wants):
        raise CheckFailed(
            f"rank {rank} sent {len(sent)} tensors where the interleaved schedule sends {len(wants)} (2 stages per "
            f"rank, {m} microbatches): each microbatch must go through every stage forward and back"
        )


def check_traffic(g, per_rank: list, reference: dict, widths: list[int], n: int) -> None:
    world_size, n_layers = len(per_rank), len(layer_model(0, widths))
    for rank, got in enumerate(per_rank):
        _check_rank_traffic(g, rank, got["sent"], reference, world_size, n_layers, n)
