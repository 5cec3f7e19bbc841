"""01_parallelism: pipeline_schedule, a model cut into 2 stages per rank and trained by an interleaved 1F1B schedule.

Every rank gets the same nn.Sequential, the whole batch, its targets and a number of microbatches; the student's
code keeps this rank's two stages (round-robin: stages r and r + p of 2p) and runs one training step of the
interleaved schedule over the microbatches (torch.distributed.pipelining's ScheduleInterleaved1F1B, or messages of
their own in the same order).

The rank sends back what it measured: every parameter's gradient (None for another rank's layers), the losses it
returned, the collectives it made (point-to-point only), what it sent and which layers it ran (stage_watch.py). The
parent checks first that each rank ran its own stages' layers only, then compares the gradients and losses with
one process, then every message each rank sent, in order, with what the interleaved schedule sends at that point
and what one process computes for it (schedule_traffic.py, interleaved.py): a schedule run in another order, a
stage on the wrong rank or a wrong microbatch count shows there.
"""

from __future__ import annotations

import torch
from torch import nn

import os

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.dispatch_mode import SWITCHED_OFF
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.host_copy import host as _host
from grader.exercises.parallelism.interleaved import expected_sends
from grader.exercises.parallelism.schedule_traffic import (
    batch,
    check_layers_used,
    check_stages_built,
    check_traffic,
    layer_model,
    layer_outputs,
    rank_layers,
)
from grader.exercises.parallelism.stage_watch import StageWatch, note_stages, read_notes

SCHEDULE_TIMEOUT = 20.0  # a few dozen tiny messages; a mismatched send and receive waits for ever


def one_process(seed, widths, n, m) -> dict:
    model = layer_model(seed, widths)
    x, y = batch(seed, n, widths)
    loss_fn = nn.MSELoss()
    loss_fn(model(x), y).backward()  # the mean over the batch = the mean of the microbatches' means (equal sizes)
    with torch.no_grad():
        losses = [loss_fn(model(a), b).item() for a, b in zip(x.tensor_split(m), y.tensor_split(m))]
    return {"grads": {name: p.grad for name, p in model.named_parameters()}, "losses": losses}


def _number(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().cpu().item())
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _schedule_in_rank(ctx, student, seed, widths, n, m, folder):
    model = layer_model(seed, widths).to(ctx.device)
    x, y = (t.to(ctx.device) for t in batch(seed, n, widths))
    os.makedirs(folder, exist_ok=True)
    notes = os.path.join(folder, f"rank{ctx.rank}")
    watch = StageWatch(model, notes)
    with record_collectives() as calls, watch:
        try:
            losses = student.task("pipeline_schedule")(model, x, y, nn.MSELoss(), m)
        finally:
            note_stages(notes, model)  # which stages it built, for the parent's diagnosis, however it ended
        if not watch.on():
            raise CheckFailed(f"rank {ctx.rank}: " + SWITCHED_OFF)
    if not isinstance(losses, (list, tuple)):
        raise CheckFailed(
            f"pipeline_schedule returned {type(losses).__name__} on rank {ctx.rank}; the contract asks "
            "for a list: the microbatches' losses on the last rank, [] on the others"
        )
    return {
        "losses": [_number(v) for v in losses],
        "loss_types": [type(v).__name__ for v in losses],
        "grads": {name: None if p.grad is None else _host(p.grad) for name, p in model.named_parameters()},
        "messages": [(c.kind, c.peer, c.dtype) for c in calls],
        "used": sorted(watch.used),
        "stages": read_notes(notes)["stages"],
        "sent": watch.sent,
    }


def other_collectives(messages) -> list[str]:
    """The collectives a rank made besides sends and receives."""
    return [kind for kind, _, _ in messages if kind not in ("send", "recv")]


def run_schedule(g, world_size, widths, n, m, seed=41):
    """Every rank's measurements and one process's, once each rank ran its own layers only and sent what they
    compute. A run that failed is first explained by what the ranks noted before it ended, where that names it."""
    with g.folder() as folder:
        args = (seed, widths, n, m, folder)
        try:
            per_rank = g.run(_schedule_in_rank, *args, world_size=world_size, timeout=SCHEDULE_TIMEOUT)
        except CheckFailed:
            notes = [read_notes(os.path.join(folder, f"rank{r}")) for r in range(world_size)]
            check_stages_built([note["stages"] for note in notes], widths)
            check_layers_used([note["used"] for note in notes], widths)
            first = next((shape for _, shape in notes[0]["sent"]), None)
            if first and first[0] != n // m:
                raise CheckFailed(
                    f"rank 0 sent microbatches of {first[0]} rows, where {n} rows in {m} microbatches make "
                    f"{n // m}, and the run failed: pass n_microbatches to the schedule as it was given (not "
                    "n_microbatches - 1 nor the number of ranks)"
                ) from None
            raise
    check_stages_built([got["stages"] for got in per_rank], widths)
    check_layers_used([got["used"] for got in per_rank], widths)
    expected = one_process(seed, widths, n, m)
    return per_rank, dict(expected, traffic=layer_outputs(seed, widths, n, m), n=n)


def check_step(g, per_rank, expected, widths, m):
    """The gradients and losses, then every message: its place in the schedule's order and what it carried."""
    check_values(g, per_rank, expected, widths, m)
    for rank, got in enumerate(per_rank):
        other = other_collectives(got["messages"])
        if other:
            raise CheckFailed(
                f"rank {rank} made {', '.join(sorted(set(other)))}: a pipeline only sends activations "
                "to the next stage and gradients to the previous one"
            )
    check_traffic(g, per_rank, expected["traffic"], widths, expected["n"])


def check_values(g, per_rank, expected, widths, m):
    world_size = len(per_rank)
    n_layers = len(layer_model(0, widths))
    for rank, got in enumerate(per_rank):
        mine = {str(i) for i in rank_layers(n_layers, rank, world_size)}
        ran = len(got["sent"]) >= len(expected_sends(rank, world_size, m))
        for name, want in expected["grads"].items():
            have = got["grads"][name]
            if name.split(".")[0] not in mine:
                if have is not None:
                    raise CheckFailed(
                        f"rank {rank} has a gradient for {name}, a layer of another rank's stage: each rank "
                        "keeps only its own stages' layers and runs only them"
                    )
                continue
            if have is None and ran:
                raise CheckFailed(
                    f"rank {rank}: {name}, a layer of its stages, got no gradient, though they ran the "
                    f"{m} microbatches' forwards and backwards: the stage was built from copies of its layers "
                    "(copy.deepcopy, or new modules), which got the gradients instead. Build it from the "
                    "model's own layers: a slice, model[first:last + 1], shares them"
                )
            if have is None:
                raise CheckFailed(
                    f"rank {rank}: {name}, a layer of its stages, got no gradient: the schedule's step "
                    "must run the backward of every microbatch (with the target and the loss on the "
                    "last stage)"
                )
            g.assert_close(
                have,
                want,
                f"rank {rank}: {name}.grad",
                "after one step the stage's gradients must equal one process's gradient of the mean "
                "loss over the whole batch (the schedule averages the microbatches' gradients)",
            )
        losses, last = got["losses"], rank == world_size - 1
        if not last and losses:
            raise CheckFailed(
                f"rank {rank} returned {len(losses)} losses; only the last stage computes the loss: "
                "return [] on the other ranks"
            )
        if last:
            if len(losses) != m or None in losses:
                count = (
                    f" (the schedule ran {len(losses)} microbatches: pass n_microbatches to it as it was given, "
                    "not n_microbatches - 1 nor the number of ranks)"
                    if losses and None not in losses
                    else ""
                )
                raise CheckFailed(
                    f"the last rank returned {len(losses)} values ({', '.join(got['loss_types'][:3])}"
                    f"); expected the {m} microbatches' losses, one number each{count}: pass a list as the "
                    "step's losses= and return it"
                )
            g.assert_close(
                torch.tensor(losses),
                torch.tensor(expected["losses"]),
                "the microbatches' losses",
                "microbatch i is rows i of x.tensor_split(n_microbatches), in order",
            )


@EXERCISE.check("pipeline_schedule", points=3)
def interleaved_schedule_matches_one_process(g):
    """2 ranks, 2 stages each, 4 microbatches of a 4-linear-layer model: gradients, losses and every message."""
    widths = [8, 12, 10, 6, 4]
    per_rank, expected = run_schedule(g, 2, widths, 8, 4)
    check_step(g, per_rank, expected, widths, 4)


@EXERCISE.check("pipeline_schedule", points=2, depends_on=("interleaved_schedule_matches_one_process",))
def interleaved_schedule_in_three_rounds(g):
    """2 ranks, 2 stages each, 6 microbatches (3 rounds of 2): gradients, losses and every message."""
    widths = [8, 12, 10, 6, 4]
    per_rank, expected = run_schedule(g, 2, widths, 12, 6)
    check_step(g, per_rank, expected, widths, 6)
