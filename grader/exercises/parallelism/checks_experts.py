"""01_parallelism: moe_layer, an expert-parallel mixture-of-experts layer (tokens to their experts and back).

Every rank holds its own tokens, the router's top-k choice for them (global expert ids and gates) and its own
experts: expert e lives on rank e // len(experts). The student's layer sends each token to the ranks of its
experts with all-to-all, runs the local experts and brings the outputs back to the token's rank, in the
token's order, weighted by the gates.

One run per check. Each rank builds every expert from the seed and hands the student its own; after the call it
runs the backward of sum(y * probe) and sends back: the output, the gradients of the tokens, of the gates and
of its experts' parameters, the collectives it made (kind, dtype) and, per all-to-all, the chunk it put in for
each peer (all_to_all_watch.py). The parent first checks what travelled against the routing (expert_traffic.py:
the routed tokens, only them, and nothing bigger), then every value against one process that holds all
experts (expert_setting.py).
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.dispatch_mode import SWITCHED_OFF
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.all_to_all_watch import AllToAllWatch
from grader.exercises.parallelism.expert_setting import local_experts, one_process, rank_inputs
from grader.exercises.parallelism.expert_traffic import check_collectives, check_dispatch, check_volume
from grader.exercises.parallelism.host_copy import host

MOE_TIMEOUT = 15.0  # a handful of tiny all-to-alls; mismatched split sizes wait for ever
COUNTS_FIRST = (
    "a rank cannot know how many rows it receives from each rank, nor for which expert, until the ranks tell "
    "each other: exchange the per-rank (or per-expert) token counts first, then use them as the all-to-all's "
    "output split sizes"
)


def _grads(module: nn.Module) -> dict:
    return {name: None if p.grad is None else host(p.grad) for name, p in module.named_parameters()}


def _moe_in_rank(ctx, student, setting):
    rank = ctx.rank
    mine = local_experts(setting, rank).to(ctx.device)  # no frame above the student's call holds the others
    n = setting["tokens"][rank]
    inp = rank_inputs(setting["seed"], rank, n, setting["d"], setting["k"], setting["weights"], device=ctx.device)
    x, gates = inp["x"].requires_grad_(), inp["gates"].requires_grad_()
    watch = AllToAllWatch(ctx.world_size)
    with record_collectives() as forward, watch:
        y = student.task("moe_layer")(x, inp["ids"].clone(), gates, mine)
        if not watch.on():
            raise CheckFailed(f"rank {rank}: " + SWITCHED_OFF)
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(x.shape):
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise CheckFailed(
            f"moe_layer returned {got} on rank {rank}; the contract asks for a tensor shaped like x, "
            f"{tuple(x.shape)}: each token's gated sum of its experts' outputs"
        )
    y_sent, dispatched = host(y), len(watch.sent)
    back = AllToAllWatch(ctx.world_size)
    if y.requires_grad:
        with record_collectives() as backward, back:
            (y * inp["probe"]).sum().backward()
    return {
        "y": y_sent,
        "x_grad": None if x.grad is None else host(x.grad),
        "gates_grad": None if gates.grad is None else host(gates.grad),
        "experts": [_grads(e) for e in mine],
        "calls": [(c.kind, c.dtype) for c in forward]
        + ([(c.kind, c.dtype) for c in backward] if y.requires_grad else []),
        "forward_sent": watch.sent[:dispatched],
        "backward_sent": back.sent,
    }


def run_moe(g, setting: dict) -> tuple[list, dict]:
    per_rank = g.run(_moe_in_rank, setting, world_size=setting["world_size"], timeout=MOE_TIMEOUT, hint=COUNTS_FIRST)
    return per_rank, one_process(setting)


def _rows_match(g, got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether got's rows are want's in some order (greedy match at the check's tolerance)."""
    left = list(range(len(want)))
    for row in got:
        hit = next((i for i in left if g.close(row, want[i])), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


def check_output(g, rank: int, got: dict, expected: dict, setting: dict) -> None:
    y, want = got["y"], expected["y"][rank]
    if g.close(y, want):
        return
    if g.close(y, expected["ungated"][rank]):
        why = "the sum of its experts' outputs without the gates: weight each expert's output by its gate"
    elif _rows_match(g, y, want):
        why = (
            "the right rows in another order: the combine must put each output back at its token's position "
            "(undo the permutation that grouped the rows by destination)"
        )
    elif not any(
        kind in ("all_to_all", "all_gather", "broadcast") and not dtype.startswith(("float", "bfloat"))
        for kind, dtype in got["calls"]
    ):
        why = "wrong, and the ranks exchanged no counts (integers) before the dispatch: " + COUNTS_FIRST
    else:
        why = "not each token's gated sum of the outputs of the experts the router chose for it"
    g.assert_close(y, want, f"rank {rank}: moe_layer's output", f"rank {rank}'s output was {why}")


def check_gradients(g, per_rank: list, expected: dict, setting: dict) -> None:
    for rank, got in enumerate(per_rank):
        for key, what in (("x_grad", "tokens"), ("gates_grad", "gates")):
            if got[key] is None:
                raise CheckFailed(
                    f"rank {rank}: the {what} got no gradient: the output must keep its autograd "
                    "graph, through the all-to-alls too (an autograd.Function whose backward runs "
                    "the reverse all-to-all)"
                )
            g.assert_close(
                got[key],
                expected[key][rank],
                f"rank {rank}: the {what}' gradient",
                "the backward of the combine must send each output's gradient back to the expert's rank, "
                "and the backward of the dispatch each input row's gradient back to its token's rank",
            )
        for local, grads in enumerate(got["experts"]):
            e = rank * setting["per_rank"] + local
            for name, want in expected["experts"][e].items():
                have = grads.get(name)
                if want is None:  # no token chose this expert: no gradient, or zeros
                    if have is not None and have.abs().sum():
                        raise CheckFailed(
                            f"rank {rank}: expert {e} received no token but its {name} has a nonzero gradient"
                        )
                    continue
                if have is None:
                    raise CheckFailed(
                        f"rank {rank}: expert {e}'s {name} got no gradient, though tokens chose "
                        "it: run the local experts on the rows received, inside autograd"
                    )
                g.assert_close(
                    have,
                    want,
                    f"rank {rank}: expert {e}'s {name}.grad",
                    "an expert's gradient sums the contributions of the tokens of every rank that "
                    "chose it, each weighted by its gate",
                )


def check_moe(g, setting: dict) -> None:
    per_rank, expected = run_moe(g, setting)
    check_collectives(per_rank)
    check_dispatch(g, per_rank, expected["inputs"], setting)
    check_volume(per_rank, expected["inputs"], setting)
    for rank, got in enumerate(per_rank):
        check_output(g, rank, got, expected, setting)
    check_gradients(g, per_rank, expected, setting)


def setting_of(world_size, per_rank, k, tokens, weights, d=6, hidden=10, seed=53) -> dict:
    return dict(
        world_size=world_size, per_rank=per_rank, k=k, tokens=tokens, weights=weights, d=d, hidden=hidden, seed=seed
    )


@EXERCISE.check("moe_layer", points=3)
def moe_two_ranks_one_expert_each_matches_one_process(g):
    """2 ranks, one expert each, top-1, 7 and 5 tokens: outputs, gradients and what travelled."""
    check_moe(g, setting_of(2, 1, 1, [7, 5], [1.0, 1.0]))


@EXERCISE.check("moe_layer", points=2, depends_on=("moe_two_ranks_one_expert_each_matches_one_process",))
def moe_rank_without_tokens(g):
    """2 ranks, two experts each, top-2: every token chooses rank 0's two experts, rank 1 receives nothing."""
    check_moe(g, setting_of(2, 2, 2, [6, 4], [1.0, 2.0, 0.0, 0.0]))
