"""03_syncbn_sharded: partition_parameters, ShardedOptimizer (ZeRO stage 1 by hand).

Every check runs the student's task in real ranks (world size 2 unless the
check asks for another; the hidden ones use 3) and compares what the ranks
computed together with one process working on the whole batch (reference.py).
Functions prefixed `_in_rank_` run inside every rank and return plain CPU
tensors; the verdicts are reached in the parent.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.scaled_closeness import assert_close_scaled, close, cpu
from grader.exercises.syncbn_sharded import EXERCISE

# --- partition_parameters ---------------------------------------------------------------


def _in_rank_partition(ctx, student, cases):
    fn = student.task("partition_parameters")
    out = []
    for shapes, world_sizes in cases:
        params = [torch.empty(shape, device=ctx.device) for shape in shapes]
        for world_size in world_sizes:
            owned = fn(params, world_size)
            try:
                owned = [[int(i) for i in indices] for indices in owned]
            except TypeError:
                raise CheckFailed(
                    f"partition_parameters returned {owned!r}; expected a list with one list of "
                    "parameter indices per rank"
                ) from None
            out.append(owned)
    return out


def _partition_cases(g, cases):
    results = g.run(_in_rank_partition, cases)
    if any(r != results[0] for r in results[1:]):
        raise CheckFailed(
            "the ranks computed different partitions from the same parameters: every rank must get "
            "the same answer (no randomness; break ties by index or rank)"
        )
    flat = [(shapes, ws) for shapes, world_sizes in cases for ws in world_sizes]
    return [(shapes, ws, owned) for (shapes, ws), owned in zip(flat, results[0])]


def _verify_covering(shapes, world_size, owned) -> None:
    case = f"for {len(shapes)} parameters over world_size={world_size}"
    if len(owned) != world_size:
        raise CheckFailed(
            f"{case} the result has {len(owned)} lists; expected one per rank ({world_size}), "
            "empty for a rank that owns nothing"
        )
    seen = sorted(i for indices in owned for i in indices)
    if seen != list(range(len(shapes))):
        missing = sorted(set(range(len(shapes))) - set(seen))
        twice = sorted({i for i in seen if seen.count(i) > 1})
        raise CheckFailed(
            f"{case} every index 0..{len(shapes) - 1} must appear exactly once; "
            + (f"missing {missing}" if missing else "")
            + (" and " if missing and twice else "")
            + (f"owned twice {twice}" if twice else "")
            + (f"unknown {sorted(set(seen) - set(range(len(shapes))))}" if not missing and not twice else "")
        )


def _verify_balance(shapes, world_size, owned) -> None:
    sizes = [torch.Size(s).numel() for s in shapes]
    loads = [sum(sizes[i] for i in indices) for indices in owned]
    largest = max(sizes)
    if max(loads) - min(loads) > largest:
        raise CheckFailed(
            f"for parameters of {sizes} elements over {world_size} ranks, the ranks own {loads} "
            f"elements: the gap exceeds the largest parameter ({largest}), so moving one parameter "
            "would balance better. Balance by element count (numel), not by number of tensors: "
            "e.g. largest first, each to the rank with the fewest elements so far"
        )


def _verify_everyone_owns(shapes, world_size, owned) -> None:
    idle = [rank for rank, indices in enumerate(owned) if not indices]
    if idle and len(shapes) >= world_size:
        raise CheckFailed(
            f"for {len(shapes)} parameters over world_size={world_size}, rank(s) {idle} own no "
            "parameter: that is no sharding at all; spread the parameters over every rank, balanced "
            "by element count"
        )


@EXERCISE.check("partition_parameters", points=1)
def every_parameter_owned_once(g):
    """One list per rank; every index exactly once; no rank idle while there are enough parameters;
    the same answer on every rank."""
    for case in _partition_cases(g, ref.PARTITION_CASES):
        _verify_covering(*case)
        _verify_everyone_owns(*case)


@EXERCISE.check("partition_parameters", points=2, depends_on=("every_parameter_owned_once",))
def balanced_by_element_count(g):
    """The busiest and the idlest rank differ by at most one largest parameter."""
    for case in _partition_cases(g, ref.PARTITION_CASES):
        _verify_covering(*case)
        _verify_balance(*case)


# --- ShardedOptimizer -------------------------------------------------------------------

SHARDED_STEPS = 10


def _inner_optimizers(opt) -> list:
    inner = getattr(opt, "optim", None)
    if isinstance(inner, torch.optim.Optimizer):
        return [inner]
    found = {}
    for value in vars(opt).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, torch.optim.Optimizer):
                found[id(item)] = item
    if not found and isinstance(opt, torch.optim.Optimizer):
        found[id(opt)] = opt
    return list(found.values())


def _in_rank_sharded(ctx, student, opt_name: str, steps: int):
    cls, kwargs, _ = ref.OPTIMIZERS[opt_name]
    model = ref.mlp().to(ctx.device)
    initial = [cpu(p) for p in model.parameters()]
    # a generator, as model.parameters() always is: the optimizer must read it only once
    opt = student.task("ShardedOptimizer")(model.parameters(), cls, **kwargs)
    x, y = (t.to(ctx.device) for t in ref.regression_batch())
    for _ in range(steps):
        opt.zero_grad()
        # The same batch on every rank: the gradients agree, as after DDP's all-reduce.
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    params = [cpu(p) for p in model.parameters()]
    # One more step from gradients that differ per rank: a sharded optimizer still leaves every
    # rank the same parameters (the owners' results, broadcast); a plain one does not.
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y + ctx.rank).backward()
    opt.step()
    after_divergent = [cpu(p) for p in model.parameters()]
    opt.zero_grad()
    leftover = [i for i, p in enumerate(model.parameters()) if p.grad is not None and bool(p.grad.any())]
    inner = _inner_optimizers(opt)
    state = sum(ref.state_elements(o) for o in inner) if inner or getattr(opt, "optim", 0) is None else None
    return {
        "initial": initial,
        "params": params,
        "leftover_grads": leftover,
        "state": state,
        "after_divergent": after_divergent,
        "backend": ctx.backend,
    }


def _disagreement(results) -> str | None:
    first = results[0]["after_divergent"]
    for rank, got in enumerate(results[1:], start=1):
        if any(not torch.equal(a, b) for a, b in zip(got["after_divergent"], first)):
            return (
                f"after a step whose gradients differ between ranks, ranks 0 and {rank} hold different "
                "parameters: each rank stepped every parameter itself, so nothing is sharded. Step only the "
                "parameters this rank owns, then broadcast each from its owner"
            )
    return None


def _require_sharded_step(results) -> None:
    problem = _disagreement(results)
    if problem:
        raise CheckFailed(problem)


def _verify_sharded_params(g, results, opt_name: str) -> None:
    expected = ref.unsharded_training(opt_name, SHARDED_STEPS)
    label = {"adam": "Adam", "sgd_momentum": "SGD with momentum"}[opt_name]
    for rank, got in enumerate(results):
        for i, (p, exp) in enumerate(zip(got["params"], expected)):
            if close(g, p, exp):
                continue
            if torch.equal(p, got["initial"][i]):
                raise CheckFailed(
                    f"rank {rank}: parameter {i} never changed in {SHARDED_STEPS} steps: another rank "
                    "owns it, and its new value must reach every rank: after the local step, "
                    "broadcast each parameter from the rank that owns it"
                )
            assert_close_scaled(
                g,
                p,
                exp,
                f"rank {rank}: parameter {i} after {SHARDED_STEPS} {label} steps",
                "the sharded run must equal the unsharded optimizer: step() updates each parameter once "
                "(on its owner) and shares it; zero_grad() clears every gradient",
            )


def _verify_sharded_state(results, opt_name: str) -> None:
    _, _, per_param = ref.OPTIMIZERS[opt_name]
    sizes = [p.numel() for p in ref.mlp().parameters()]
    total, largest, world_size = per_param * sum(sizes), per_param * max(sizes), len(results)
    states = [got["state"] for got in results]
    if any(s is None for s in states):
        raise CheckFailed(
            "no inner optimizer found: keep the optimizer_cls instance over this rank's parameters "
            "in self.optim (None on a rank that owns no parameter)"
        )
    if world_size > 1 and all(s >= total for s in states):
        raise CheckFailed(
            f"each rank keeps optimizer state for every parameter ({states} elements; all of the "
            f"state is {total}): build the inner optimizer over the parameters this rank owns only"
        )
    if sum(states) > total:
        raise CheckFailed(
            f"the ranks hold {states} state elements, {sum(states)} in all, more than the {total} an "
            "unsharded optimizer holds: some parameters have state on more than one rank"
        )
    if sum(states) < total:
        raise CheckFailed(
            f"the ranks hold {states} state elements, {sum(states)} in all, fewer than the {total} an "
            "unsharded optimizer holds: some parameter is owned by no rank"
        )
    bound = total / world_size + largest
    for rank, state in enumerate(states):
        if state > bound:
            raise CheckFailed(
                f"rank {rank} holds {state} of {total} state elements; about 1/{world_size} is "
                f"expected (at most {bound:.0f}, one largest parameter above an even share): "
                "use partition_parameters, balanced by element count"
            )


@EXERCISE.check("ShardedOptimizer", points=3)
def matches_unsharded_adam(g):
    """10 steps of ShardedOptimizer(Adam) give every rank the parameters of 10 steps of plain Adam."""
    results = g.run(_in_rank_sharded, "adam", SHARDED_STEPS)
    _verify_sharded_params(g, results, "adam")
    _require_sharded_step(results)


@EXERCISE.check("ShardedOptimizer", points=1, depends_on=("matches_unsharded_adam",))
def matches_unsharded_sgd_momentum(g):
    """The same with SGD(momentum=0.9): one state tensor per parameter instead of two."""
    results = g.run(_in_rank_sharded, "sgd_momentum", SHARDED_STEPS)
    _verify_sharded_params(g, results, "sgd_momentum")
    _require_sharded_step(results)


@EXERCISE.check("ShardedOptimizer", points=2)
def optimizer_state_is_sharded(g):
    """Each rank's optimizer state is about 1/N of the total (within one largest parameter), none duplicated."""
    # the run of matches_unsharded_adam (shared: one launch, grader/shared_runs.py); the state's size is the same
    # after any number of steps
    _verify_sharded_state(g.run(_in_rank_sharded, "adam", SHARDED_STEPS), "adam")


@EXERCISE.check("ShardedOptimizer", points=1)
def zero_grad_clears_every_gradient(g):
    """After zero_grad() no parameter, owned here or not, keeps a gradient (of an optimizer that
    shards something: its state or its step)."""
    results = g.run(_in_rank_sharded, "sgd_momentum", SHARDED_STEPS)  # matches_unsharded_sgd_momentum's run
    total = ref.OPTIMIZERS["sgd_momentum"][2] * sum(p.numel() for p in ref.mlp().parameters())
    if len(results) > 1 and all((got["state"] or 0) >= total for got in results) and _disagreement(results):
        raise CheckFailed(
            "this is no sharded optimizer: every rank keeps the whole optimizer state and steps "
            "every parameter itself. " + _disagreement(results)
        )
    for rank, got in enumerate(results):
        if got["leftover_grads"]:
            raise CheckFailed(
                f"rank {rank}: after zero_grad() parameters {got['leftover_grads']} still have "
                "gradients: clear the gradients of every parameter, not only of the ones this "
                "rank owns (backward fills them all)"
            )
