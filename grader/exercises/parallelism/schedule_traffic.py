"""pipeline_schedule: what travels between the stages, against one process (parent side).

One process runs each microbatch through the model layer by layer and keeps every layer's output and the gradient
of that microbatch's loss with respect to it. Stage r's activations (what it sends to r + 1) must be the outputs of
its last layer, microbatch by microbatch, in order; the gradients it sends to r - 1 must be those of the output of
the layer before its first, up to one positive factor per rank (torch's schedules send the gradient of each
microbatch's loss and scale the parameters' gradients afterwards; a hand-written schedule may divide each loss by
the number of microbatches first: the task's text does not say which).

And each rank must have read the parameters of its own stage's layers only (stage_watch.StageWatch): a rank that
runs the whole model, or another split of it, is told which layers it ran.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed


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


def stage_layers(n_layers: int, rank: int, world_size: int) -> list[int]:
    return torch.tensor_split(torch.arange(n_layers), world_size)[rank].tolist()


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


def check_layers_used(used_per_rank: list, widths: list[int]) -> None:
    """Each rank read the parameters of its own stage's layers, and of no other."""
    model = layer_model(0, widths)
    world_size, weighted = len(used_per_rank), _with_params(model)
    for rank, used in enumerate(used_per_rank):
        mine = stage_layers(len(model), rank, world_size)
        foreign = sorted(set(used) - set(mine))
        if not foreign:
            continue
        span = f"layers {mine[0]} to {mine[-1]}" if len(mine) > 1 else f"layer {mine[0]}"
        if weighted <= set(used):
            raise CheckFailed(
                f"rank {rank} ran every layer of the model (it read the parameters of layers {foreign}, which "
                f"belong to other stages); its stage holds only {span}: build the stage from those layers "
                f"(model[{mine[0]}:{mine[-1] + 1}]), not from the whole model. A rank that runs the whole model is "
                "not a pipeline: each stage runs its own layers and sends its activations to the next"
            )
        raise CheckFailed(
            f"rank {rank} ran layers {foreign}, which belong to other stages; rank {rank} of {world_size} holds "
            f"{span}: torch.tensor_split(torch.arange(len(model)), world_size)[{rank}]. When the layers do not "
            "divide evenly, the first ranks get one layer more (not the last rank the remainder)"
        )


def _which_layer(g, sent: torch.Tensor, outputs: list[torch.Tensor]) -> int | None:
    """The layer whose output a stage sent instead of its own last layer's (a hint, at the plan's tolerance)."""
    return next((k for k, out in enumerate(outputs) if g.close(sent, out)), None)


def check_activations(g, rank: int, sent: list, reference: dict, mine: list[int], n: int) -> None:
    """What rank sent to the next stage: its last layer's output, microbatch by microbatch."""
    m = len(reference["outputs"])
    for i, activation in enumerate(sent[:m]):
        outputs = reference["outputs"][i]
        want = outputs[mine[-1]]
        if activation.shape[:1] != want.shape[:1]:
            raise CheckFailed(
                f"rank {rank} sent microbatches of {activation.shape[0]} rows, where {n} rows in {m} microbatches "
                f"make {want.shape[0]}: pass n_microbatches to the schedule as it was given (not "
                "n_microbatches - 1), so that each microbatch is rows i of x.tensor_split(n_microbatches)"
            )
        if g.close(activation, want):
            continue
        layer = _which_layer(g, activation, outputs)
        if not activation.abs().sum():
            why = "zeros: send what the stage's own layers computed for that microbatch"
        elif layer is not None:
            why = (
                f"the output of layer {layer}; the stage ends with layer {mine[-1]}: rank {rank}'s stage holds "
                f"layers torch.tensor_split(torch.arange(len(model)), world_size)[{rank}] (the first ranks one "
                "layer more when they do not divide evenly; the hidden check uses 3 ranks and such a model)"
            )
        else:
            why = "not what its layers compute from that microbatch: send each stage's own output, in order"
        raise CheckFailed(f"rank {rank}'s activation for microbatch {i}, sent to rank {rank + 1}, was {why}")


def check_gradients(g, rank: int, sent: list, reference: dict, mine: list[int]) -> None:
    """What rank sent to the previous stage: the gradients of its input, one positive factor for all."""
    m = len(reference["grads"])
    wants = [reference["grads"][i][mine[0] - 1] for i in range(m)]
    got = sent[:m]
    if any(a.shape != b.shape for a, b in zip(got, wants)):
        raise CheckFailed(
            f"rank {rank} sent gradients of shapes {[list(a.shape) for a in got]} to rank {rank - 1}, where its "
            f"input's are {[list(b.shape) for b in wants]}: send the gradient of the stage's input"
        )
    flat_got, flat_want = torch.cat([a.flatten() for a in got]), torch.cat([b.flatten() for b in wants])
    factor = float(flat_got @ flat_want / (flat_want @ flat_want).clamp_min(1e-30))
    for i, (a, b) in enumerate(zip(got, wants)):
        if factor > 0 and g.close(a, factor * b):
            continue
        what = "zeros" if not a.abs().sum() else "not the gradient of its input for that microbatch's loss"
        raise CheckFailed(
            f"rank {rank}'s gradient for microbatch {i}, sent back to rank {rank - 1}, was {what}: the backward "
            "of each microbatch sends the gradient of the loss with respect to the activation the stage received"
        )


def check_traffic(g, per_rank: list, reference: dict, widths: list[int], n: int) -> None:
    world_size, n_layers = len(per_rank), len(layer_model(0, widths))
    for rank, got in enumerate(per_rank):
        mine = stage_layers(n_layers, rank, world_size)
        onwards = [t for peer, t in got["sent"] if peer == rank + 1]
        back = [t for peer, t in got["sent"] if peer == rank - 1]
        if rank < world_size - 1:
            check_activations(g, rank, onwards, reference, mine, n)
        if rank > 0:
            check_gradients(g, rank, back, reference, mine)
