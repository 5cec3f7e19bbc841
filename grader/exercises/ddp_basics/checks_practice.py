"""02_ddp_basics, DDP in practice: train_with_accumulation, train_uneven, BucketedDDP."""
from __future__ import annotations

import contextlib
import inspect

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from grader.checks import CheckFailed
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import reference_practice as rp
from grader.exercises.ddp_basics.exercise import check
from grader.grading import describe_failure
from grader.tolerances import assert_close, tolerance


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    rtol, atol = tolerance(torch.float32)
    return torch.allclose(a, b, rtol=rtol, atol=atol)


# --- train_with_accumulation -----------------------------------------------------------------

MICRO, K = 4, 2  # 4 micro-batches per rank, 2 per optimizer step: 2 steps


def _counting_hook(events: list, bucket):
    """DDP comm hook: note the bucket, then all-reduce it as DDP does by default."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    events.append(bucket.index())
    return default_hooks.allreduce_hook(None, bucket)


def _in_rank_accumulate(ctx, student):
    model = DDP(ref.tiny_net(seed=0))
    events: list = []
    model.register_comm_hook(events, _counting_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=rp.LR)
    optimizer.register_step_pre_hook(lambda *_: events.append("step"))  # steps and all-reduces, in order
    loss = student.task("train_with_accumulation")(model, rp.micro_batches(ctx.rank, MICRO), optimizer,
                                                   nn.MSELoss(), K)
    try:
        loss = float(loss)
    except (TypeError, ValueError, RuntimeError):
        loss = None
    return ref.flat_params(model.module), events, loss


@check("train_with_accumulation", points=3)
def accumulation_matches_big_batch_step(g):
    expected, _ = rp.accumulation_reference(g.world_size, MICRO, K)
    undivided, _ = rp.accumulation_reference(g.world_size, MICRO, K, divide=False)
    for rank, (params, events, _) in enumerate(g.run(_in_rank_accumulate)):
        steps = events.count("step")
        if steps == MICRO:
            raise CheckFailed(f"optimizer.step() ran {steps} times for {MICRO} micro-batches: the step is taken every "
                              f"micro-batch; step (then zero_grad) once every accumulation_steps={K} micro-batches")
        if steps != MICRO // K:
            raise CheckFailed(f"optimizer.step() ran {steps} times, expected {MICRO // K} ({MICRO} micro-batches, "
                              f"accumulation_steps={K}): one step per accumulation_steps micro-batches")
        if _close(params, undivided) and not _close(params, expected):
            raise CheckFailed(f"the parameters moved as if the gradient were {K} times too large: the loss is not "
                              "divided by the number of micro-batches; backward (loss / accumulation_steps)")
        assert_close(params, expected, f"rank {rank}'s parameters after {MICRO // K} accumulated steps",
                     "each step must equal one step on the global batch (every rank's accumulation_steps "
                     "micro-batches): accumulate loss / accumulation_steps, all-reduce once, then step")


def _all_reduces_per_step(events: list) -> list[list[int]]:
    groups, current = [], []
    for event in events:
        if event == "step":
            groups.append(current)
            current = []
        else:
            current.append(event)
    return groups + ([current] if current else [])


@check("train_with_accumulation", points=2)
def accumulation_one_all_reduce_per_bucket_per_step(g):
    for rank, (_, events, _) in enumerate(g.run(_in_rank_accumulate)):
        groups = _all_reduces_per_step(events)
        if not any(groups):
            raise CheckFailed(f"rank {rank}: DDP all-reduced no gradient at all: the last micro-batch of each step "
                              "must run forward and backward outside model.no_sync()")
        if len(groups) != MICRO // K or not all(groups):
            raise CheckFailed(f"rank {rank}: gradient all-reduces per optimizer step: {[len(x) for x in groups]}, "
                              f"expected {MICRO // K} steps each with one all-reduce per bucket")
        for step, buckets in enumerate(groups):
            worst = max(buckets.count(b) for b in buckets)
            if worst > 1:
                raise CheckFailed(f"rank {rank}, optimizer step {step}: a bucket was all-reduced {worst} times, once per "
                                  f"micro-batch: no_sync is missing, so accumulation costs {K} times the traffic; run "
                                  "the first accumulation_steps - 1 micro-batches inside `with model.no_sync():`")


@check("train_with_accumulation", points=1)
def accumulation_returns_global_mean_loss(g):
    _, expected = rp.accumulation_reference(g.world_size, MICRO, K)
    losses = [loss for _, _, loss in g.run(_in_rank_accumulate)]
    if any(loss is None for loss in losses):
        raise CheckFailed("train_with_accumulation must return the mean loss as a number (a float)")
    if len(set(losses)) > 1:
        raise CheckFailed(f"the ranks returned different losses {losses}: each returned its own mean; all_reduce the "
                          "loss sum and the sample count, then divide")
    if abs(losses[0] * K - expected) <= 1e-4 * abs(expected) + 1e-6:
        raise CheckFailed(f"returned {losses[0]:.5f}, {K} times less than the mean loss {expected:.5f}: return the "
                          "mean of the micro-batch losses, not of loss / accumulation_steps")
    assert_close(torch.tensor(losses[0]), torch.tensor(expected), "the returned loss",
                 "return the mean loss over every micro-batch of every rank")


# --- train_uneven -----------------------------------------------------------------------------

LENGTHS = [5, 3]  # rank 0's batches, rank 1's
UNEVEN_TIMEOUT_S = 15.0  # a forgotten Join hangs: the run is stopped after this bound


def _in_rank_uneven(ctx, student, lengths):
    model = DDP(ref.tiny_net(seed=0))
    optimizer = torch.optim.SGD(model.parameters(), lr=rp.LR)
    steps: list = []
    optimizer.register_step_pre_hook(lambda *_: steps.append(1))
    data = rp.micro_batches(ctx.rank, lengths[ctx.rank], seed=1)
    student.task("train_uneven")(model, data, optimizer, nn.MSELoss())
    return ref.flat_params(model.module), len(steps)


def _uneven_run(g) -> list:
    lengths = LENGTHS + [4] * (g.world_size - len(LENGTHS))
    result = g.run_raw(_in_rank_uneven, lengths, timeout=min(g.timeout, UNEVEN_TIMEOUT_S))
    if result.hung:
        raise CheckFailed(f"the ranks hung: rank 0 has {lengths[0]} batches and rank 1 has {lengths[1]}; once rank 1 "
                          "has run out, rank 0's backward waits in an all-reduce that rank 1 never joins. Use Join: "
                          "wrap the loop in `with Join([model]):` (torch.distributed.algorithms.join)\n"
                          + result.failure())
    if not result.ok:
        raise CheckFailed(describe_failure(result))
    values = [r.value for r in result.ranks]
    for rank, (_, steps) in enumerate(values):
        if steps != lengths[rank]:
            shortest = (" (it stopped at the shortest loader: with Join the ranks with more data train on all of "
                        "it, while the finished ranks shadow their all-reduces)") if steps == min(lengths) else ""
            raise CheckFailed(f"rank {rank} took {steps} optimizer steps for its {lengths[rank]} batches{shortest}: "
                              "one step per batch of its own loader, all of them")
    return [params for params, _ in values]


@check("train_uneven", points=2)
def uneven_finishes_without_hang(g):
    _uneven_run(g)


@check("train_uneven", points=2)
def uneven_matches_join_semantics(g):
    expected = rp.join_reference(LENGTHS)
    for rank, params in enumerate(_uneven_run(g)):
        if _close(params, rp.join_reference(LENGTHS, divide_by_world_size=False)):
            raise CheckFailed(f"rank {rank}: the last steps averaged over the ranks still training only; DDP with Join "
                              "(its default divide_by_initial_world_size=True) divides by the whole world size")
        assert_close(params, expected, f"rank {rank}'s parameters after training with {LENGTHS} batches",
                     "train every batch of the loader, one step per batch, inside `with Join([model]):`; "
                     "every rank then ends with the longest-training rank's parameters")


# --- BucketedDDP ------------------------------------------------------------------------------

@contextlib.contextmanager
def _recording_all_reduce(cls, calls: list, phase: dict):
    """dist.all_reduce (and the student's own name for it) notes each call: (phase, data_ptr, async_op)."""
    real = dist.all_reduce

    def recording(tensor, *args, **kwargs):
        async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
        calls.append((phase["now"], tensor.data_ptr(), bool(async_op)))
        return real(tensor, *args, **kwargs)

    functions = [inspect.unwrap(f) for f in vars(cls).values() if inspect.isfunction(f)]
    spaces = [vars(dist)] + ([functions[0].__globals__] if functions else [])
    patched = [(space, name) for space in spaces for name, value in list(space.items()) if value is real]
    for space, name in patched:
        space[name] = recording
    try:
        yield
    finally:
        for space, name in patched:
            space[name] = real


def _require_by_hand(mini) -> None:
    if isinstance(mini, DDP) or any(isinstance(m, DDP) for m in getattr(mini, "modules", list)()):
        raise CheckFailed("BucketedDDP is (or wraps) torch's DistributedDataParallel: build it by hand, with gradient "
                          "hooks that fill buckets and all-reduce each one asynchronously")


def _in_rank_bucketed(ctx, student, name, cap_mb, steps=2):
    factory, features = rp.MODELS[name], rp.IN_FEATURES[name]
    ddp = DDP(ref.seeded(factory, 1), find_unused_parameters=(name == "unused"))
    module = ref.seeded(factory, 1)
    calls, phase, first_ready = [], {"now": "init"}, []
    first = next(p for p in module.parameters() if p.requires_grad)
    first.register_post_accumulate_grad_hook(lambda p: first_ready.append(len(calls)))  # runs before the student's
    cls = student.task("BucketedDDP")
    history = []
    with _recording_all_reduce(cls, calls, phase):
        mini = cls(module, cap_mb)
        _require_by_hand(mini)
        opts = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1) for m in (ddp.module, module)]
        for step in range(steps):
            gen = torch.Generator().manual_seed(100 * step + ctx.rank)
            x, y = torch.randn(6, features, generator=gen), torch.randn(6, 1, generator=gen)
            for opt in opts:
                opt.zero_grad()
            nn.MSELoss()(ddp(x), y).backward()
            start, phase["now"] = len(calls), "backward"
            nn.MSELoss()(mini(x), y).backward()
            phase["now"] = "after backward"
            mini.finish_gradient_synchronization()
            phase["now"] = "after"
            before_first = first_ready[-1] - start if first_ready else None
            history.append((ref.flat_grads(ddp.module), ref.flat_grads(module), calls[start:], before_first))
            for opt in opts:
                opt.step()
    return history


def _bucketed_grads_match(g, name, cap_mb):
    for rank, history in enumerate(g.run(_in_rank_bucketed, name, cap_mb)):
        for step, (ddp_grad, grad, _, _) in enumerate(history):
            likely = "average each bucket (all-reduce the flat bucket, divide by the world size, copy back)"
            if torch.allclose(grad, ddp_grad * g.world_size, rtol=1e-4, atol=1e-6) and ddp_grad.abs().sum() > 0:
                likely = "the gradients are world_size times DDP's: divide the all-reduced sum by the world size"
            elif name == "unused":
                likely = ("a bucket holding a parameter that forward never uses never becomes ready: "
                          "all-reduce the buckets still pending in finish_gradient_synchronization")
            assert_close(grad, ddp_grad, f"{name} model, rank {rank}, step {step}: BucketedDDP's gradient", likely)


@check("BucketedDDP", points=3)
def bucketed_gradients_match_ddp(g):
    for name, cap_mb in (("wide", 0.002), ("frozen", 0.0001), ("tied", 0.00005), ("unused", 0.0001)):
        _bucketed_grads_match(g, name, cap_mb)  # several buckets each


CAPS_MB = (0.0005, 0.003, 100.0)  # one gradient per bucket, a few per bucket, one bucket for all


@check("BucketedDDP", points=2)
def bucketed_one_all_reduce_per_bucket(g):
    n_params = len(list(rp.wide_net().parameters()))
    for cap in CAPS_MB:
        expected = rp.bucket_counts(rp.wide_net(), cap)
        for rank, history in enumerate(g.run(_in_rank_bucketed, "wide", cap)):
            for step, (_, _, calls, _) in enumerate(history):
                ptrs = [ptr for _, ptr, _ in calls]
                if len(set(ptrs)) < len(ptrs):
                    raise CheckFailed(f"bucket_cap_mb={cap}, step {step}: a bucket was all-reduced twice (the same "
                                      "tensor went to dist.all_reduce again, e.g. in finish_gradient_synchronization): "
                                      "launch each bucket once, then only wait for it")
                if len(calls) not in expected:
                    hint = (" One per parameter: group the gradients into buckets of up to bucket_cap_mb."
                            if len(calls) == n_params else "")
                    if len(calls) in {2 * n for n in expected}:
                        hint = (" Each bucket was all-reduced twice: launch it once (in the hook, or in "
                                "finish_gradient_synchronization for a bucket that never became ready), then only "
                                "wait for it.")
                    raise CheckFailed(f"bucket_cap_mb={cap}, rank {rank}, step {step}: {len(calls)} all-reduces, "
                                      f"expected {min(expected)} (one per bucket, gradients in reverse parameter order, "
                                      f"a new bucket when the next one would exceed the cap).{hint}")


@check("BucketedDDP", points=2)
def bucketed_all_reduce_overlaps_backward(g):
    for rank, history in enumerate(g.run(_in_rank_bucketed, "wide", 0.003)):
        for step, (_, _, calls, before_first) in enumerate(history):
            if not calls:
                raise CheckFailed("no dist.all_reduce was called during the step: all-reduce each bucket")
            if not all(async_op for _, _, async_op in calls):
                raise CheckFailed(f"step {step}: dist.all_reduce was called without async_op=True: backward then "
                                  "waits for each bucket; keep the work handle and wait() in "
                                  "finish_gradient_synchronization")
            late = [p for p, _, _ in calls if p != "backward"]
            if late:
                raise CheckFailed(f"step {step}: {len(late)} of {len(calls)} all-reduces started after backward "
                                  "returned (in finish_gradient_synchronization): launch a bucket's all-reduce from "
                                  "the gradient hook of its last parameter, during backward")
            if not before_first:
                raise CheckFailed(f"step {step}: no bucket's all-reduce started before the first layer's gradient was "
                                  "ready: launch each bucket as soon as its own gradients are all ready, not all "
                                  "together at the end of backward")


@check("BucketedDDP", points=1, hidden=True, world_size=3)
def bucketed_gradients_match_ddp_three_ranks(g):
    _bucketed_grads_match(g, "wide", 0.002)
