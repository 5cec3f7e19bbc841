"""02_ddp_basics, DDP in practice: BucketedDDP (gradient buckets all-reduced during backward)."""
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
from grader.tolerances import assert_close

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


def _bucketed_history(ctx, student, name, cap_mb, steps=2):
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


def _in_rank_bucketed(ctx, student, configs):
    """Each (model name, bucket_cap_mb) in one run: [(DDP's grads, the student's, all-reduce calls, ...) per step]."""
    return [_bucketed_history(ctx, student, name, cap_mb) for name, cap_mb in configs]


GRADIENT_CASES = (("wide", 0.002), ("frozen", 0.0001), ("tied", 0.00005), ("unused", 0.0001))  # several buckets


def _bucketed_grads_match(g, cases):
    for rank, runs in enumerate(g.run(_in_rank_bucketed, cases)):
        for (name, _), history in zip(cases, runs):
            for step, (ddp_grad, grad, _, _) in enumerate(history):
                likely = "average each bucket (all-reduce the flat bucket, divide by the world size, copy back)"
                if torch.allclose(grad, ddp_grad * g.world_size, rtol=1e-4, atol=1e-6) and ddp_grad.abs().sum() > 0:
                    likely = "the gradients are world_size times DDP's: divide the all-reduced sum by the world size"
                elif name == "unused":
                    likely = ("a bucket holding a parameter that forward never uses never becomes ready: "
                              "all-reduce the buckets still pending in finish_gradient_synchronization")
                assert_close(grad, ddp_grad, f"{name} model, rank {rank}, step {step}: BucketedDDP's gradient",
                             likely)


@check("BucketedDDP", points=3)
def bucketed_gradients_match_ddp(g):
    _bucketed_grads_match(g, GRADIENT_CASES)


CAPS_MB = (0.0005, 0.003, 100.0)  # one gradient per bucket, a few per bucket, one bucket for all


@check("BucketedDDP", points=2)
def bucketed_one_all_reduce_per_bucket(g):
    n_params = len(list(rp.wide_net().parameters()))
    results = g.run(_in_rank_bucketed, [("wide", cap) for cap in CAPS_MB])
    for i, cap in enumerate(CAPS_MB):
        expected = rp.bucket_counts(rp.wide_net(), cap)
        for rank, history in enumerate(runs[i] for runs in results):
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
    for rank, (history,) in enumerate(g.run(_in_rank_bucketed, [("wide", 0.003)])):
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
