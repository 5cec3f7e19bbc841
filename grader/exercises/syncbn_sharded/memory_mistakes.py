"""plan_memory's typical mistakes: what each one estimates for a strategy, and what to tell the student.

With Ψ parameters, N ranks, P bytes per parameter in the parameters' dtype (a gradient and its place in DDP's
buckets take as many) and S bytes of optimizer state per parameter (fp32 Adam: P = 4, S = 8; bf16 with fp32 master
copies: P = 2, S = 12), a rank holds, before its activations A: DDP 3PΨ + SΨ, ZeRO-1 3PΨ + SΨ/N, FSDP2 (2P + S)Ψ/N.
Each mistake below is that sum with one term wrong; the message of the one nearest to the estimate is said.
"""

from __future__ import annotations

from grader.exercises.syncbn_sharded.memory_plan import FP32

ONE_COPY_MISSING = (
    "one copy of the gradients is missing: DDP keeps the gradients and, beside them, its communication buckets "
    "(with its default gradient_as_bucket_view=False the buckets are a second copy, in the gradients' dtype), "
    "under DDP and under ZeRO-1 alike"
)
MIXED_OPTIMIZER = (
    "in mixed precision the optimizer keeps 12 bytes per parameter: an fp32 master copy (4) and Adam's two fp32 "
    "moments (8), whatever the parameters' dtype"
)
NOT_ALL_FP32 = (
    "the parameters are bf16 here: a parameter, its gradient and its place in DDP's buckets take 2 bytes each; "
    "only the optimizer's master copy and moments are fp32"
)


def mistakes(kind: str, psi: int, p: int, world: int, act: int, state: int) -> list[tuple[float, str]]:
    """(what a typical mistake estimates, what to say) for one strategy; p: bytes of a parameter."""
    params, optimizer = p * psi, (2 * FP32 + (FP32 if p < FP32 else 0)) * psi
    out = _activation_and_unit_mistakes(world, act, state, p)
    if p < FP32:
        out += _mixed_precision_mistakes(kind, psi, world, act)
    by_kind = {"ddp": _ddp_mistakes, "zero1": _zero1_mistakes, "fsdp2": _fsdp2_mistakes}
    return out + by_kind[kind](params, optimizer, world, act)


def _activation_and_unit_mistakes(world: int, act: int, state: int, p: int) -> list[tuple[float, str]]:
    return [
        (
            state,
            "the activations are left out: add activation_bytes (they are per rank and sharded by none of the "
            "three strategies)",
        ),
        (
            state + act / world,
            "the activations are divided by the world size: each rank keeps those of its own "
            "batch, whatever the strategy",
        ),
        ((state + act) / p, "you seem to count elements, not bytes: use each parameter's element_size()"),
        (
            state / p + act,
            "you seem to count the parameters, gradients and optimizer state as elements, not bytes",
        ),
    ]


def _mixed_precision_mistakes(kind: str, psi: int, world: int, act: int) -> list[tuple[float, str]]:
    p, n = 2, world
    if kind == "ddp":
        return [(3 * p * psi + 8 * psi + act, MIXED_OPTIMIZER), (20 * psi + act, NOT_ALL_FP32)]
    if kind == "zero1":
        return [
            (3 * p * psi + 8 * psi / n + act, MIXED_OPTIMIZER),
            (12 * psi + 8 * psi / n + act, NOT_ALL_FP32),
            (
                3 * p * psi + 4 * psi + 8 * psi / n + act,
                "ZeRO-1 shards the whole optimizer state, the fp32 master copies with the moments: each rank keeps "
                "the master copies of the parameters it updates, 1/N of them",
            ),
        ]
    return [((2 * p + 8) * psi / n + act, MIXED_OPTIMIZER)]


def _ddp_mistakes(params: float, optimizer: float, world: int, act: int) -> list[tuple[float, str]]:
    return [
        (2 * params + optimizer + act, ONE_COPY_MISSING),
        (3 * params + act, "the optimizer state is left out: Adam keeps two moments per parameter"),
    ]


def _zero1_mistakes(params: float, optimizer: float, world: int, act: int) -> list[tuple[float, str]]:
    return [
        (2 * params + optimizer / world + act, ONE_COPY_MISSING),
        (
            params / world + 2 * params + optimizer / world + act,
            "ZeRO-1 shards only the optimizer state: every rank keeps all the parameters, all the gradients and "
            "DDP's buckets, as under DDP (sharding the gradients too is ZeRO-2)",
        ),
        (
            (2 * params + optimizer) / world + act,
            "ZeRO-1 shards only the optimizer state: every rank keeps all the parameters (and gradients) as under "
            "DDP; what you estimated is FSDP2's",
        ),
        (
            3 * params + optimizer + act,
            "ZeRO-1's optimizer state is not divided by the world size: each rank keeps the state of 1/N of the "
            "parameters",
        ),
    ]


def _fsdp2_mistakes(params: float, optimizer: float, world: int, act: int) -> list[tuple[float, str]]:
    return [
        (
            2 * params + optimizer + act,
            "FSDP2's estimate is not divided by the world size: each rank keeps 1/N of the parameters, of the "
            "gradients and of the optimizer state",
        ),
        ((params + optimizer) / world + act, "FSDP2 without the gradients: each rank keeps its shard of them too"),
        (
            params + (params + optimizer) / world + act,
            "FSDP2 shards the parameters too: between steps each rank keeps only its 1/N of them",
        ),
    ]
