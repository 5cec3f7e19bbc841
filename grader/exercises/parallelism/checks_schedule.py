"""01_parallelism: pipeline_schedule, a model cut into stages and trained by a GPipe or 1F1B schedule.

Every rank gets the same nn.Sequential, the whole batch, its targets and a schedule's name; the student's code
keeps this rank's layers as a stage and runs one training step of the schedule over the microbatches
(torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B, or messages of their own in the same order).

The rank sends back what it measured: every parameter's gradient (None for another stage's layers), the losses
it returned, the point-to-point messages of the step as the dispatcher saw them (float payloads only: the
stage's shape exchange sends integers first), what it sent and which layers it ran (stage_watch.py). The parent
checks first that each rank ran its own layers only and sent what they compute (schedule_traffic.py), then
compares the gradients and losses with one process, and the order of forwards and backwards the messages show
with the schedule's:

    F_i  this stage finished microbatch i's forward  (sent activation i on; the last stage: received it)
    B_i  this stage ran microbatch i's backward      (sent its input gradient back; the first stage: received it)

GPipe runs every forward, then every backward: F^m B^m. 1F1B (torch's Schedule1F1B) runs w = min(m, p - r)
forwards on rank r of p, then alternates one backward and one forward, then drains the last w backwards, so at
most w microbatches' activations are alive on a rank at once.
"""

from __future__ import annotations

import torch
from torch import nn

import os

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.dispatch_mode import SWITCHED_OFF
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.host import host as _host
from grader.exercises.parallelism.schedule_traffic import (
    batch,
    check_layers_used,
    check_traffic,
    layer_model,
    layer_outputs,
    stage_layers,
)
from grader.exercises.parallelism.stage_watch import StageWatch, read_notes

SCHEDULE_TIMEOUT = 20.0  # a few dozen tiny messages; a mismatched send and receive waits for ever
SCHEDULES = ("GPipe", "1F1B")


def one_process(seed, widths, n, m) -> dict:
    model = layer_model(seed, widths)
    x, y = batch(seed, n, widths)
    loss_fn = nn.MSELoss()
    loss_fn(model(x), y).backward()  # the mean over the batch = the mean of the microbatches' means (equal sizes)
    with torch.no_grad():
        losses = [loss_fn(model(a), b).item() for a, b in zip(x.tensor_split(m), y.tensor_split(m))]
    return {"grads": {name: p.grad for name, p in model.named_parameters()}, "losses": losses}


def expected_order(schedule: str, rank: int, world_size: int, m: int) -> str:
    if schedule == "GPipe":
        return "F" * m + "B" * m
    warmup = min(m, world_size - rank)
    return "F" * warmup + "BF" * (m - warmup) + "B" * warmup


def _number(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().cpu().item())
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _schedule_in_rank(ctx, student, seed, widths, n, m, schedule, folder):
    model = layer_model(seed, widths).to(ctx.device)
    x, y = (t.to(ctx.device) for t in batch(seed, n, widths))
    os.makedirs(folder, exist_ok=True)
    watch = StageWatch(model, os.path.join(folder, f"rank{ctx.rank}"))
    with record_collectives() as calls, watch:
        losses = student.task("pipeline_schedule")(model, x, y, nn.MSELoss(), m, schedule)
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
        "sent": watch.sent,
    }


def events(messages, rank: int, world_size: int) -> tuple[str, list[str]]:
    """F/B string from the float messages; the other collectives a rank made."""
    order, other = [], []
    for kind, peer, dtype in messages:
        if kind not in ("send", "recv"):
            other.append(kind)
            continue
        if not dtype.startswith(("float", "bfloat")):
            continue  # the stages' shape exchange (integers, pickled metadata)
        if peer == rank + 1:
            forward = kind == "send"  # to the next stage: an activation; from it: a gradient
        elif peer == rank - 1:
            forward = kind == "recv"
        else:
            other.append(f"{kind} with rank {peer}")
            continue
        last, first = rank == world_size - 1, rank == 0
        if forward and (peer == rank + 1 or last):  # one event per microbatch: a middle stage counts its send
            order.append("F")
        elif not forward and (peer == rank - 1 or first):
            order.append("B")
    return "".join(order), other


def run_schedule(g, world_size, widths, n, m, schedule, seed=41):
    """Every rank's measurements and one process's, once each rank ran its own layers only and sent what they
    compute. A run that failed is first explained by what the ranks noted before it ended, where that names it."""
    with g.folder() as folder:
        args = (seed, widths, n, m, schedule, folder)
        try:
            per_rank = g.run(_schedule_in_rank, *args, world_size=world_size, timeout=SCHEDULE_TIMEOUT)
        except CheckFailed:
            notes = [read_notes(os.path.join(folder, f"rank{r}")) for r in range(world_size)]
            check_layers_used([note["used"] for note in notes], widths)
            first = next((shape for peer, shape in notes[0]["sent"] if peer == 1), None)
            if first and first[0] != n // m:
                raise CheckFailed(
                    f"rank 0 sent microbatches of {first[0]} rows, where {n} rows in {m} microbatches make "
                    f"{n // m}, and the run failed: pass n_microbatches to the schedule as it was given (not "
                    "n_microbatches - 1)"
                ) from None
            raise
    check_layers_used([got["used"] for got in per_rank], widths)
    expected = one_process(seed, widths, n, m)
    return per_rank, dict(expected, traffic=layer_outputs(seed, widths, n, m), n=n)


def check_step(g, per_rank, expected, widths, m, schedule):
    """The gradients and losses, the order of the messages, then what the messages carried."""
    check_values(g, per_rank, expected, widths, m)
    check_order(per_rank, schedule, m)
    check_traffic(g, per_rank, expected["traffic"], widths, expected["n"])


def check_values(g, per_rank, expected, widths, m):
    world_size = len(per_rank)
    n_layers = len(layer_model(0, widths))
    for rank, got in enumerate(per_rank):
        mine = {str(i) for i in stage_layers(n_layers, rank, world_size)}
        ran = len(events(got["messages"], rank, world_size)[0]) == 2 * m
        for name, want in expected["grads"].items():
            have = got["grads"][name]
            if name.split(".")[0] not in mine:
                if have is not None:
                    raise CheckFailed(
                        f"rank {rank} has a gradient for {name}, a layer of another stage: each rank "
                        "keeps only its own layers (the stage's) and runs only them"
                    )
                continue
            if have is None and ran:
                raise CheckFailed(
                    f"rank {rank}: {name}, a layer of its stage, got no gradient, though the stage ran the "
                    f"{m} microbatches' forwards and backwards: the stage was built from copies of its layers "
                    "(copy.deepcopy, or new modules), which got the gradients instead. Build it from the "
                    "model's own layers: a slice, model[first:last + 1], shares them"
                )
            if have is None:
                raise CheckFailed(
                    f"rank {rank}: {name}, a layer of its stage, got no gradient: the schedule's step "
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
                minus_one = " (n_microbatches - 1 passed to the schedule?)" if len(losses) == m - 1 else ""
                raise CheckFailed(
                    f"the last rank returned {len(losses)} values ({', '.join(got['loss_types'][:3])}"
                    f"); expected the {m} microbatches' losses, one number each{minus_one}: pass a list as the "
                    "step's losses= and return it"
                )
            g.assert_close(
                torch.tensor(losses),
                torch.tensor(expected["losses"]),
                "the microbatches' losses",
                "microbatch i is rows i of x.tensor_split(n_microbatches), in order",
            )


def check_order(per_rank, schedule, m):
    world_size = len(per_rank)
    for rank, got in enumerate(per_rank):
        order, other = events(got["messages"], rank, world_size)
        if other:
            raise CheckFailed(
                f"rank {rank} made {', '.join(sorted(set(other)))}: a pipeline only sends activations "
                "to the next stage and gradients to the previous one"
            )
        want = expected_order(schedule, rank, world_size, m)
        if order == want:
            continue
        why = (
            f"that is {'GPipe' if schedule == '1F1B' else '1F1B'}'s order: run the schedule the task names"
            if order == expected_order("1F1B" if schedule == "GPipe" else "GPipe", rank, world_size, m)
            else f"{order.count('F')} forwards and {order.count('B')} backwards: the step must run each of the "
            f"{m} microbatches (n_microbatches) once forward and once backward"
            if len(order) != 2 * m
            else ""
        )
        raise CheckFailed(
            f"rank {rank} of {world_size}: its messages show the order {order or 'nothing'} (F: a "
            f"microbatch's forward, B: its backward); {schedule} with {m} microbatches runs {want} "
            f"there" + (f"; {why}" if why else "")
        )


@EXERCISE.check("pipeline_schedule", points=3)
def schedule_1f1b_matches_one_process_in_its_order(g):
    """2 ranks, 1F1B, 4 microbatches of a 4-linear-layer model: gradients, losses and the order of the messages."""
    widths = [8, 12, 10, 6, 4]
    per_rank, expected = run_schedule(g, 2, widths, 8, 4, "1F1B")
    check_step(g, per_rank, expected, widths, 4, "1F1B")


@EXERCISE.check("pipeline_schedule", points=2, depends_on=("schedule_1f1b_matches_one_process_in_its_order",))
def schedule_gpipe_matches_one_process_in_its_order(g):
    """2 ranks, GPipe, 4 microbatches: gradients, losses and the order of the messages."""
    widths = [8, 12, 10, 6, 4]
    per_rank, expected = run_schedule(g, 2, widths, 8, 4, "GPipe")
    check_step(g, per_rank, expected, widths, 4, "GPipe")
