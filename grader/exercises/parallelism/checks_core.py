"""Checks of exercise 01_parallelism: the core of data, tensor and pipeline
parallelism, built by hand, each run in real processes and compared with a
single-process reference (reference.py).

    checks_core.py         shard_indices, average_gradients, ring_all_reduce (here)
    checks_tensor.py       ColumnParallelLinear
    checks_pipeline.py     pipeline_step; pipeline_diagnosis.py names a failed pipeline's likely mistake
"""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.grading import describe_failure
from grader.exercises.parallelism import reference as ref
from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.host_copy import host as _host
from grader.exercises.parallelism.p2p_only import point_to_point_only

RING_TIMEOUT = 10.0  # a ring of a few hundred floats takes milliseconds; anything longer is a deadlock


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# ============================================================ shard_indices
SHARD_CASES = [(10, 2), (9, 2), (10, 3), (7, 4), (4, 4)]


def _shards_in_rank(ctx, student, cases):
    shard_indices = student.task("shard_indices")
    out = []
    for n, ws in cases:
        shares = []
        for rank in range(ws):
            share = shard_indices(n, rank, ws)
            if isinstance(share, torch.Tensor):
                raise CheckFailed(
                    f"shard_indices({n}, {rank}, {ws}) returned a tensor: return a list of ints "
                    "(tensor.tolist() converts one)"
                )
            try:
                share = list(share)
            except TypeError:
                raise CheckFailed(
                    f"shard_indices({n}, {rank}, {ws}) returned {type(share).__name__}, not a list of ints"
                ) from None
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in share):
                raise CheckFailed(
                    f"shard_indices({n}, {rank}, {ws}) returned {share!r}: the items must be "
                    "Python ints (sample indices)"
                )
            shares.append(share)
        out.append(shares)
    return out


def _judge_shares(n: int, ws: int, shares: list[list[int]]) -> None:
    call = f"shard_indices({n}, rank, {ws})"
    owner: dict[int, int] = {}
    for rank, share in enumerate(shares):
        for i in share:
            if not 0 <= i < n:
                raise CheckFailed(f"{call} for rank {rank} contains {i}, outside range({n})")
            if i in owner:
                who = "twice in its share" if owner[i] == rank else f"in the shares of ranks {owner[i]} and {rank}"
                raise CheckFailed(
                    f"{call}: sample {i} is {who}; shares must be disjoint (does your function "
                    "use its `rank` argument, and step by world_size?)"
                )
            owner[i] = rank
    missing = sorted(set(range(n)) - set(owner))
    if missing:
        raise CheckFailed(
            f"{call}: samples {missing[:5]} are in no rank's share; the shares must cover all "
            f"{n} samples (when {n} is not divisible by {ws}, the remainder must not be dropped)"
        )
    sizes = [len(s) for s in shares]
    if max(sizes) - min(sizes) > 1:
        raise CheckFailed(
            f"{call}: share sizes {sizes} differ by more than one; give the {n % ws} left-over "
            "samples to different ranks, one each"
        )


def _check_shards(g, cases):
    per_rank = g.run(_shards_in_rank, cases)
    for (n, ws), shares in zip(cases, per_rank[0]):
        _judge_shares(n, ws, shares)
    if any(r != per_rank[0] for r in per_rank[1:]):
        raise CheckFailed(
            "shard_indices gave different answers in different processes for the same arguments: "
            "it must depend only on (n_samples, rank, world_size), e.g. not on a random shuffle "
            "without a fixed seed"
        )


@EXERCISE.check("shard_indices", points=1.5)
def shards_are_disjoint_covering_balanced(g):
    """Shares of 9 and 10 samples over 2, 3 and 4 ranks: disjoint, covering, balanced."""
    _check_shards(g, SHARD_CASES)


# ======================================================== average_gradients
def _average_in_rank(ctx, student, model_seed, data_seed, n, frozen_first):
    import torch.nn.functional as F

    average_gradients = student.task("average_gradients")
    model = ref.mlp(model_seed, frozen_first).to(ctx.device)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    x, y = (t.to(ctx.device) for t in ref.regression_batch(data_seed, n))
    mine = ref.equal_shard(n, ctx.world_size, ctx.rank)
    F.mse_loss(model(x[mine]), y[mine]).backward()
    local = {name: _host(p.grad) for name, p in model.named_parameters() if p.grad is not None}
    try:
        average_gradients(model)
    except CheckFailed:
        raise
    except Exception as exc:
        hint = (
            " The model has a frozen layer and an unused parameter, whose .grad is None: skip parameters "
            "without a gradient."
            if frozen_first
            else ""
        )
        raise CheckFailed(f"average_gradients(model) raised {_error_text(exc)} on rank {ctx.rank}.{hint}") from exc
    return {
        "backend": ctx.backend,
        "local": local,
        "grads": {name: None if p.grad is None else _host(p.grad) for name, p in model.named_parameters()},
        "changed": [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])],
    }


def _check_average(g, world_size, n, frozen_first):
    model_seed, data_seed = 11, 12
    expected = ref.full_batch_gradients(model_seed, data_seed, n, frozen_first)
    per_rank = g.run(_average_in_rank, model_seed, data_seed, n, frozen_first, world_size=world_size)
    for rank, got in enumerate(per_rank):
        if got["changed"]:
            raise CheckFailed(
                f"average_gradients changed the parameters {got['changed']} on rank {rank}: it must "
                "average the gradients (p.grad), not the weights (p.data)"
            )
        for name, grad in got["grads"].items():
            if name not in expected:
                if grad is not None:
                    raise CheckFailed(
                        f"parameter {name!r} takes no part in the loss (its .grad was None), but "
                        f"average_gradients gave it a gradient on rank {rank}: leave p.grad None"
                    )
                continue
            want = expected[name]
            if torch.allclose(grad, got["local"][name]) and not g.close(grad, want):
                raise CheckFailed(
                    f"on rank {rank}, {name}.grad is still this rank's own shard gradient: "
                    "average_gradients must combine the gradients of all ranks (dist.all_reduce)"
                )
            if g.close(grad, want * world_size):
                raise CheckFailed(
                    f"on rank {rank}, {name}.grad is {world_size} times the full-batch gradient: "
                    "all_reduce sums; divide by the world size to average"
                )
            g.assert_close(
                grad,
                want,
                f"rank {rank}: {name}.grad after average_gradients",
                "every rank must end with the average of all ranks' gradients, which for equal shards "
                "and a mean loss is the full-batch gradient",
            )


@EXERCISE.check("average_gradients", points=2)
def averaged_gradients_match_full_batch(g):
    """The grader's world size (2), 4 samples per rank: every rank ends with the full-batch gradient."""
    _check_average(g, g.world_size, 4 * g.world_size, frozen_first=False)


# ========================================================== ring_all_reduce
def _ring_in_rank(ctx, student, seed, length):
    ring_all_reduce = student.task("ring_all_reduce")
    tensor = ref.rank_tensor(seed, ctx.rank, length).to(ctx.device)
    original = tensor.clone()
    with point_to_point_only("ring_all_reduce", ring_all_reduce) as traffic:
        returned = ring_all_reduce(tensor)
    return {
        "backend": ctx.backend,
        "tensor": _host(tensor),
        "unchanged": torch.equal(tensor, original),
        "returned": _host(returned) if isinstance(returned, torch.Tensor) else None,
        "messages": [(m.kind, m.peer, m.numel) for m in traffic.messages],
    }


def _run_ring(g, world_size, length, seed=5):
    result = g.run_raw(_ring_in_rank, seed, length, world_size=world_size, timeout=RING_TIMEOUT)
    if not result.ok:
        text = result.failure()
        hung = any(r.status == "hung" for r in result.ranks) or "timed out" in text.lower()
        if hung:
            raise CheckFailed(
                f"ring_all_reduce did not finish within {RING_TIMEOUT:.0f} s on {world_size} ranks: a deadlock. "
                "If every rank first calls a blocking dist.send and only then dist.recv, all ranks wait for a "
                "receiver that never comes; send with dist.isend (and .wait() on it after the recv), or order "
                "the send and recv by rank. Also check that every rank sends and receives the same number of "
                "messages, with matching sizes.\n" + text
            )
        hint = f"ring_all_reduce failed on {world_size} ranks with a tensor of {length} elements"
        if "IndexError" in text:
            hint += (
                " (torch.chunk returns fewer than world_size pieces when the tensor is short, e.g. 2 pieces "
                "for 2 elements on 3 ranks; torch.tensor_split always returns world_size pieces)"
            )
        raise CheckFailed(describe_failure(result, hint))
    return [r.value for r in result.ranks]


def _check_ring_sum(g, world_size, length):
    per_rank = _run_ring(g, world_size, length)
    expected = ref.ring_expected(5, world_size, length)
    for rank, got in enumerate(per_rank):
        if got["unchanged"] and length:
            hint = (
                " (it returned the right sum: write it into `tensor` instead)"
                if got["returned"] is not None
                and got["returned"].shape == expected.shape
                and g.close(got["returned"], expected)
                else ""
            )
            raise CheckFailed(
                f"ring_all_reduce left the tensor of rank {rank} unchanged: it must sum in place, "
                f"writing into `tensor` (tensor[a:b] += ..., tensor.copy_(...)){hint}"
            )
        g.assert_close(
            got["tensor"],
            expected,
            f"rank {rank}: the tensor after ring_all_reduce ({world_size} ranks, {length} elements)",
            "every element must end as the sum over all ranks; with a length not divisible by the world "
            "size, check the chunk boundaries (torch.tensor_split gives world_size chunks, torch.chunk "
            "may give fewer)",
        )
    return per_rank


def _check_ring_traffic(per_rank, world_size, length):
    bound = ref.ring_chunk_bound(length, world_size)
    for rank, got in enumerate(per_rank):
        sends = [(peer, numel) for kind, peer, numel in got["messages"] if kind == "send"]
        recvs = [(peer, numel) for kind, peer, numel in got["messages"] if kind == "recv"]
        nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size
        if not sends or not recvs:
            raise CheckFailed(
                f"rank {rank} sent {len(sends)} and received {len(recvs)} messages: a ring all-reduce "
                "passes chunks with dist.isend/irecv (or send/recv) to its neighbours"
            )
        wrong = sorted({p for p, _ in sends if p != nxt})
        if wrong:
            raise CheckFailed(
                f"rank {rank} sent to rank(s) {wrong}: in a ring each rank sends only to the next "
                f"rank, (rank + 1) % world_size = {nxt}"
            )
        wrong = sorted({p for p, _ in recvs if p not in (prev, None)}, key=str)
        if wrong:
            raise CheckFailed(
                f"rank {rank} received from rank(s) {wrong}: in a ring each rank receives only from "
                f"the previous rank, (rank - 1) % world_size = {prev}"
            )
        biggest = max(n for _, n in sends)
        if biggest > bound:
            raise CheckFailed(
                f"rank {rank} sent {biggest} elements in one message, but a ring all-reduce sends "
                f"chunks of at most ceil({length}/{world_size}) = {bound}: split the tensor into "
                "world_size chunks and pass one chunk per step (reduce-scatter, then all-gather)"
            )
        total = sum(n for _, n in sends)
        if total > 2 * (world_size - 1) * bound:
            raise CheckFailed(
                f"rank {rank} sent {total} elements in all, more than a ring's 2*(N-1) chunks "
                f"({2 * (world_size - 1)} x {bound}): each step should send exactly one chunk"
            )


@EXERCISE.check("ring_all_reduce", points=2)
def ring_sums_in_place(g):
    """The grader's world size (2), lengths 8 and 7: every rank ends with the sum, in place, without collectives."""
    for length in (4 * g.world_size, 4 * g.world_size - 1):
        _check_ring_sum(g, g.world_size, length)


@EXERCISE.check("ring_all_reduce", points=2, depends_on=("ring_sums_in_place",))
def ring_passes_chunks_to_neighbours(g):
    """The grader's world size (2), length 10: sends only to the next rank, one chunk of about numel/N per message."""
    per_rank = _check_ring_sum(g, g.world_size, 10)
    _check_ring_traffic(per_rank, g.world_size, 10)
