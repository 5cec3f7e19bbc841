"""Checks of exercise 01_parallelism: the core of data, tensor and pipeline
parallelism, built by hand, each run in real processes and compared with a
single-process reference (reference.py)."""
from __future__ import annotations

import torch

from grader.checks import CheckFailed, Exercise, describe_failure
from grader.engine.stacks import describe_exception, format_exception
from grader.exercises.parallelism import reference as ref
from grader.exercises.parallelism.p2p_only import point_to_point_only
from grader.tolerances import assert_close

EXERCISE = Exercise(
    "01_parallelism",
    tasks=["shard_indices", "average_gradients", "ring_all_reduce", "ColumnParallelLinear", "pipeline_step"],
)

RING_TIMEOUT = 10.0  # a ring of a few hundred floats takes milliseconds; anything longer is a deadlock
PIPELINE_TIMEOUT = 8.0  # a few tiny messages each way: longer is a deadlock


def _host(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy to send back (a CPU tensor's .cpu() is the tensor itself,
    which the student's code may still change)."""
    return t.detach().cpu().clone()


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# ============================================================ shard_indices
SHARD_CASES = [(10, 2), (9, 2), (10, 3), (7, 4), (4, 4)]
SHARD_EDGE_CASES = [(2, 3), (0, 2), (1001, 4), (5, 1)]


def _shards_in_rank(ctx, student, cases):
    shard_indices = student.task("shard_indices")
    out = []
    for n, ws in cases:
        shares = []
        for rank in range(ws):
            share = shard_indices(n, rank, ws)
            if isinstance(share, torch.Tensor):
                raise CheckFailed(f"shard_indices({n}, {rank}, {ws}) returned a tensor: return a list of ints "
                                  "(tensor.tolist() converts one)")
            try:
                share = list(share)
            except TypeError:
                raise CheckFailed(f"shard_indices({n}, {rank}, {ws}) returned {type(share).__name__}, "
                                  "not a list of ints") from None
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in share):
                raise CheckFailed(f"shard_indices({n}, {rank}, {ws}) returned {share!r}: the items must be "
                                  "Python ints (sample indices)")
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
                raise CheckFailed(f"{call}: sample {i} is {who}; shares must be disjoint (does your function "
                                  "use its `rank` argument, and step by world_size?)")
            owner[i] = rank
    missing = sorted(set(range(n)) - set(owner))
    if missing:
        raise CheckFailed(f"{call}: samples {missing[:5]} are in no rank's share; the shares must cover all "
                          f"{n} samples (when {n} is not divisible by {ws}, the remainder must not be dropped)")
    sizes = [len(s) for s in shares]
    if max(sizes) - min(sizes) > 1:
        raise CheckFailed(f"{call}: share sizes {sizes} differ by more than one; give the {n % ws} left-over "
                          "samples to different ranks, one each")


def _check_shards(g, cases):
    per_rank = g.run(_shards_in_rank, cases)
    for (n, ws), shares in zip(cases, per_rank[0]):
        _judge_shares(n, ws, shares)
    if any(r != per_rank[0] for r in per_rank[1:]):
        raise CheckFailed("shard_indices gave different answers in different processes for the same arguments: "
                          "it must depend only on (n_samples, rank, world_size), e.g. not on a random shuffle "
                          "without a fixed seed")


@EXERCISE.check("shard_indices", points=1.5)
def shards_are_disjoint_covering_balanced(g):
    """Shares of 9 and 10 samples over 2, 3 and 4 ranks: disjoint, covering, balanced."""
    _check_shards(g, SHARD_CASES)


@EXERCISE.check("shard_indices", points=0.5, hidden=True)
def shards_edge_cases(g):
    """Fewer samples than ranks, no samples, a large batch, one rank."""
    _check_shards(g, SHARD_EDGE_CASES)


# ======================================================== average_gradients
def _average_in_rank(ctx, student, model_seed, data_seed, n, frozen_first):
    import torch.nn.functional as F

    average_gradients = student.task("average_gradients")
    model = ref.mlp(model_seed, frozen_first).to(ctx.device)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    x, y = (t.to(ctx.device) for t in ref.regression_batch(data_seed, n))
    mine = ref.contiguous_shards(n, ctx.world_size)[ctx.rank]
    F.mse_loss(model(x[mine]), y[mine]).backward()
    local = {name: _host(p.grad) for name, p in model.named_parameters() if p.grad is not None}
    try:
        average_gradients(model)
    except CheckFailed:
        raise
    except Exception as exc:
        hint = (" The model has a frozen layer and an unused parameter, whose .grad is None: skip parameters "
                "without a gradient." if frozen_first else "")
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
            raise CheckFailed(f"average_gradients changed the parameters {got['changed']} on rank {rank}: it must "
                              "average the gradients (p.grad), not the weights (p.data)")
        for name, grad in got["grads"].items():
            if name not in expected:
                if grad is not None:
                    raise CheckFailed(f"parameter {name!r} takes no part in the loss (its .grad was None), but "
                                      f"average_gradients gave it a gradient on rank {rank}: leave p.grad None")
                continue
            want = expected[name]
            if torch.allclose(grad, got["local"][name]) and not torch.allclose(grad, want, rtol=1e-4, atol=1e-6):
                raise CheckFailed(f"on rank {rank}, {name}.grad is still this rank's own shard gradient: "
                                  "average_gradients must combine the gradients of all ranks (dist.all_reduce)")
            if torch.allclose(grad, want * world_size, rtol=1e-4, atol=1e-6):
                raise CheckFailed(f"on rank {rank}, {name}.grad is {world_size} times the full-batch gradient: "
                                  "all_reduce sums; divide by the world size to average")
            assert_close(grad, want, f"rank {rank}: {name}.grad after average_gradients",
                         "every rank must end with the average of all ranks' gradients, which for equal shards "
                         "and a mean loss is the full-batch gradient", backend=got["backend"])


@EXERCISE.check("average_gradients", points=2)
def averaged_gradients_match_full_batch(g):
    """The grader's world size (2), 4 samples per rank: every rank ends with the full-batch gradient."""
    _check_average(g, g.world_size, 4 * g.world_size, frozen_first=False)


@EXERCISE.check("average_gradients", points=1, hidden=True, world_size=3)
def averaged_gradients_three_ranks_frozen_layer(g):
    """3 ranks and a model with a frozen layer and an unused parameter."""
    _check_average(g, 3, 9, frozen_first=True)


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
                "messages, with matching sizes.\n" + text)
        hint = f"ring_all_reduce failed on {world_size} ranks with a tensor of {length} elements"
        if "IndexError" in text:
            hint += (" (torch.chunk returns fewer than world_size pieces when the tensor is short, e.g. 2 pieces "
                     "for 2 elements on 3 ranks; torch.tensor_split always returns world_size pieces)")
        raise CheckFailed(describe_failure(result, hint))
    return [r.value for r in result.ranks]


def _check_ring_sum(g, world_size, length):
    per_rank = _run_ring(g, world_size, length)
    expected = ref.ring_expected(5, world_size, length)
    for rank, got in enumerate(per_rank):
        if got["unchanged"] and length:
            hint = (" (it returned the right sum: write it into `tensor` instead)"
                    if got["returned"] is not None and got["returned"].shape == expected.shape
                    and torch.allclose(got["returned"], expected, rtol=1e-4, atol=1e-5) else "")
            raise CheckFailed(f"ring_all_reduce left the tensor of rank {rank} unchanged: it must sum in place, "
                              f"writing into `tensor` (tensor[a:b] += ..., tensor.copy_(...)){hint}")
        assert_close(got["tensor"], expected, f"rank {rank}: the tensor after ring_all_reduce "
                     f"({world_size} ranks, {length} elements)",
                     "every element must end as the sum over all ranks; with a length not divisible by the world "
                     "size, check the chunk boundaries (torch.tensor_split gives world_size chunks, torch.chunk "
                     "may give fewer)", backend=got["backend"])
    return per_rank


def _check_ring_traffic(per_rank, world_size, length):
    bound = ref.ring_chunk_bound(length, world_size)
    for rank, got in enumerate(per_rank):
        sends = [(peer, numel) for kind, peer, numel in got["messages"] if kind == "send"]
        recvs = [(peer, numel) for kind, peer, numel in got["messages"] if kind == "recv"]
        nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size
        if not sends or not recvs:
            raise CheckFailed(f"rank {rank} sent {len(sends)} and received {len(recvs)} messages: a ring all-reduce "
                              "passes chunks with dist.isend/irecv (or send/recv) to its neighbours")
        wrong = sorted({p for p, _ in sends if p != nxt})
        if wrong:
            raise CheckFailed(f"rank {rank} sent to rank(s) {wrong}: in a ring each rank sends only to the next "
                              f"rank, (rank + 1) % world_size = {nxt}")
        wrong = sorted({p for p, _ in recvs if p not in (prev, None)}, key=str)
        if wrong:
            raise CheckFailed(f"rank {rank} received from rank(s) {wrong}: in a ring each rank receives only from "
                              f"the previous rank, (rank - 1) % world_size = {prev}")
        biggest = max(n for _, n in sends)
        if biggest > bound:
            raise CheckFailed(f"rank {rank} sent {biggest} elements in one message, but a ring all-reduce sends "
                              f"chunks of at most ceil({length}/{world_size}) = {bound}: split the tensor into "
                              "world_size chunks and pass one chunk per step (reduce-scatter, then all-gather)")
        total = sum(n for _, n in sends)
        if total > 2 * (world_size - 1) * bound:
            raise CheckFailed(f"rank {rank} sent {total} elements in all, more than a ring's 2*(N-1) chunks "
                              f"({2 * (world_size - 1)} x {bound}): each step should send exactly one chunk")


@EXERCISE.check("ring_all_reduce", points=2)
def ring_sums_in_place(g):
    """The grader's world size (2), lengths 8 and 7: every rank ends with the sum, in place, without collectives."""
    for length in (4 * g.world_size, 4 * g.world_size - 1):
        _check_ring_sum(g, g.world_size, length)


@EXERCISE.check("ring_all_reduce", points=2)
def ring_passes_chunks_to_neighbours(g):
    """The grader's world size (2), length 10: sends only to the next rank, one chunk of about numel/N per message."""
    per_rank = _check_ring_sum(g, g.world_size, 10)
    _check_ring_traffic(per_rank, g.world_size, 10)


@EXERCISE.check("ring_all_reduce", points=1, hidden=True, world_size=3)
def ring_three_ranks(g):
    """3 ranks: lengths 9, 10 and 2 (shorter than the world: empty chunks)."""
    for length in (9, 10, 2):
        per_rank = _check_ring_sum(g, 3, length)
        _check_ring_traffic(per_rank, 3, length)


@EXERCISE.check("ring_all_reduce", points=1, hidden=True, world_size=4)
def ring_four_ranks(g):
    """4 ranks, length 1001."""
    per_rank = _check_ring_sum(g, 4, 1001)
    _check_ring_traffic(per_rank, 4, 1001)


# ===================================================== ColumnParallelLinear
def _column_in_rank(ctx, student, seed, in_features, out_features, shape):
    cls = student.task("ColumnParallelLinear")
    layer = cls(in_features, out_features).to(ctx.device)
    start, stop = ref.output_rows(out_features, ctx.world_size, ctx.rank)
    rows = stop - start
    weight, bias = getattr(layer, "weight", None), getattr(layer, "bias", None)
    if not isinstance(weight, torch.nn.Parameter) or not isinstance(bias, torch.nn.Parameter):
        raise CheckFailed("ColumnParallelLinear must have nn.Parameter attributes `weight` and `bias` "
                          "(this rank's shard of the full layer's weight and bias)")
    if tuple(weight.shape) != (rows, in_features) or tuple(bias.shape) != (rows,):
        raise CheckFailed(
            f"ColumnParallelLinear({in_features}, {out_features}) on rank {ctx.rank} of {ctx.world_size} has "
            f"weight {tuple(weight.shape)} and bias {tuple(bias.shape)}; expected ({rows}, {in_features}) and "
            f"({rows},): rank r holds the output rows torch.tensor_split(torch.arange(out_features), "
            f"world_size)[r] (here {start}..{stop - 1})")
    held = sum(p.numel() for p in layer.parameters())
    if held != rows * (in_features + 1):
        raise CheckFailed(f"the layer holds {held} parameter elements on rank {ctx.rank}, but its shard is "
                          f"{rows * (in_features + 1)}: keep only this rank's rows, not the full weight")
    full_w, full_b = ref.linear_weights(seed, in_features, out_features)
    with torch.no_grad():
        weight.copy_(full_w[start:stop])
        bias.copy_(full_b[start:stop])
    x, probe = (t.to(ctx.device) for t in ref.linear_inputs(seed, shape, out_features))
    x.requires_grad_(True)
    y = layer(x)
    if not isinstance(y, torch.Tensor):
        raise CheckFailed(f"forward returned {type(y).__name__}, not a tensor")
    if tuple(y.shape) != tuple(probe.shape):
        raise CheckFailed(f"forward of an input of shape {tuple(shape)} returned shape {tuple(y.shape)} on rank "
                          f"{ctx.rank}; expected the full output {tuple(probe.shape)}: gather every rank's "
                          "output columns and concatenate them along the last dimension, in rank order")
    if not y.requires_grad:
        return {"y": _host(y), "weight_grad": None, "bias_grad": None, "x_grad": None, "no_graph": True,
                "backend": ctx.backend}
    (y * probe).sum().backward()
    grad = lambda t: None if t.grad is None else _host(t.grad)  # noqa: E731
    return {"y": _host(y), "weight_grad": grad(weight), "bias_grad": grad(bias), "x_grad": grad(x),
            "no_graph": False, "rows": (start, stop), "backend": ctx.backend}


def _run_column(g, world_size, in_features, out_features, shape, seed=21):
    per_rank = g.run(_column_in_rank, seed, in_features, out_features, shape, world_size=world_size)
    return per_rank, ref.linear_reference(seed, in_features, out_features, shape)


def _check_column_forward(per_rank, expected):
    for rank, got in enumerate(per_rank):
        assert_close(got["y"], expected["y"], f"rank {rank}: ColumnParallelLinear output",
                     "each rank computes x @ weight_shard.T + bias_shard, and the full output is the shards' "
                     "outputs concatenated along the last dimension in rank order", backend=got["backend"])


def _check_column_shard_grads(per_rank, expected, world_size):
    for rank, got in enumerate(per_rank):
        if got["no_graph"] or got["weight_grad"] is None:
            raise CheckFailed(f"no gradient reached the weight shard on rank {rank}: the gather in forward must "
                              "be autograd-aware (dist.all_gather is not: wrap it in a torch.autograd.Function "
                              "whose backward returns this rank's slice of the output gradient)")
        start, stop = got["rows"]
        for name in ("weight_grad", "bias_grad"):
            want = expected[name][start:stop]
            if world_size > 1 and torch.allclose(got[name], want * world_size, rtol=1e-4, atol=1e-6):
                raise CheckFailed(
                    f"on rank {rank} the {name.split('_')[0]} shard's gradient is {world_size} times too large: "
                    "the backward of torch.distributed.nn.functional.all_gather sums the output gradient over "
                    "ranks, which multiplies it by world_size when every rank computes the same loss. Write your "
                    "own autograd.Function whose backward keeps only this rank's slice of the gradient")
            assert_close(got[name], want, f"rank {rank}: {name.replace('_grad', '')}.grad of the shard",
                         "each shard's gradient must be the matching rows of the full layer's gradient",
                         backend=got["backend"])


def _check_column_input_grad(per_rank, expected):
    for rank, got in enumerate(per_rank):
        if got["x_grad"] is None:
            raise CheckFailed(f"the input got no gradient on rank {rank}")
        assert_close(got["x_grad"], expected["x_grad"], f"rank {rank}: the input's gradient",
                     "each rank's input gradient covers only its own output columns; sum it over ranks in "
                     "backward (an identity autograd.Function on the input whose backward all-reduces)",
                     backend=got["backend"])


@EXERCISE.check("ColumnParallelLinear", points=2)
def column_parallel_forward(g):
    """The grader's world size (2), 4 -> 6 features: every rank holds 3 output rows and returns the full output."""
    per_rank, expected = _run_column(g, g.world_size, 4, 6, (5, 4))
    _check_column_forward(per_rank, expected)


@EXERCISE.check("ColumnParallelLinear", points=3)
def column_parallel_shard_gradients(g):
    """The grader's world size (2): each shard's weight and bias gradients equal its rows of the full layer's gradients."""
    per_rank, expected = _run_column(g, g.world_size, 4, 6, (5, 4))
    _check_column_forward(per_rank, expected)
    _check_column_shard_grads(per_rank, expected, g.world_size)


@EXERCISE.check("ColumnParallelLinear", points=2)
def column_parallel_input_gradient(g):
    """The grader's world size (2): the input gradient is the full layer's, on every rank."""
    per_rank, expected = _run_column(g, g.world_size, 4, 6, (5, 4))
    _check_column_input_grad(per_rank, expected)


@EXERCISE.check("ColumnParallelLinear", points=1, hidden=True, world_size=3)
def column_parallel_uneven_three_ranks(g):
    """3 ranks, 5 -> 7 features (shards of 3, 2, 2 rows), a 3-D input."""
    per_rank, expected = _run_column(g, 3, 5, 7, (2, 3, 5))
    _check_column_forward(per_rank, expected)
    _check_column_shard_grads(per_rank, expected, 3)
    _check_column_input_grad(per_rank, expected)


# ============================================================ pipeline_step
SHAPE_MISMATCH = (
    "a message did not fit the buffer receiving it: a shape (or dtype) mismatch. Rank 1 cannot know the "
    "activation's shape in advance: rank 0 must first send it (its number of dimensions, then its sizes, as "
    "int64 tensors) and rank 1 allocate the activation buffer from that header, as float32; rank 0 receives the "
    "gradient into a buffer of the activation's shape. Both ranks must send and receive the same messages in the "
    "same order (ndim, shape, activation; then the gradient), with the same dtypes")
CONTIGUOUS = (
    "dist.send and dist.recv need contiguous tensors, and an activation need not be (this one comes out of a "
    "transpose): send activation.detach().contiguous(), and receive into torch.empty(shape, ...) (torch."
    "empty_like of a non-contiguous tensor is not contiguous either)")
NO_ACTIVATION_GRAD = (
    "the received activation has no .grad after the backward on rank 1: call activation.requires_grad_() after "
    "dist.recv and before running the stage, so that backward computes the gradient rank 0 needs")
ORDER = (
    "A blocking dist.send returns only once the peer has received the message, and dist.recv only once the peer "
    "has sent it, so the calls must pair up in the same order on both ranks: rank 0 sends ndim, shape and "
    "activation, then receives the gradient; rank 1 receives ndim, shape and activation, runs its stage, the loss "
    "and backward, then sends the gradient")


def _pipeline_crash_hint(rank: int, exc: BaseException, stage_ran: bool, loss_calls: int) -> str | None:
    """The likely mistake behind an exception in the student's pipeline_step."""
    text = str(exc)
    if "has to be contiguous" in text:
        return CONTIGUOUS
    if rank == 1 and "NoneType" in text:
        return NO_ACTIVATION_GRAD
    if rank == 1 and "floating point dtype can require gradients" in text:
        return ("rank 1's activation buffer is not a float tensor: allocate it as float32, the activation's dtype "
                "(not targets.dtype, an integer type with a classification loss)")
    if rank == 1 and stage_ran and not loss_calls:
        return ("rank 1 ran its stage but never called loss_fn: compute the loss with the function passed in, "
                "loss_fn(output, targets), not with a loss of your own")
    if rank == 0 and "does not require grad" in text:
        return ("rank 0 must call backward on the activation its stage returned (the one with a graph; send a "
                "detached copy, but keep the original), with the gradient received from rank 1")
    return None


def _pipeline_in_rank(ctx, student, kind, n):
    step = student.task("pipeline_step")
    first, second, inputs, targets, loss_fn = ref.pipeline_case(kind, n)
    stage = (first, second)[ctx.rank].to(ctx.device)
    inputs, targets = inputs.to(ctx.device), targets.to(ctx.device)
    ran, loss_calls = [], []
    stage.register_forward_hook(lambda module, args, output: ran.append(True))

    def counted_loss(output, target):  # the given loss, counted: rank 1 must use it
        loss_calls.append(True)
        return loss_fn(output, target)

    try:
        value = step(stage, inputs, targets, counted_loss)
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as exc:
        hint = _pipeline_crash_hint(ctx.rank, exc, bool(ran), len(loss_calls))
        if hint is None:
            raise  # the traceback is the best clue
        raise CheckFailed(f"pipeline_step raised on rank {ctx.rank} ({ref.pipeline_description(kind, n)}): "
                          f"{hint}\n" + format_exception(describe_exception(exc))) from exc
    if isinstance(value, torch.Tensor):
        value = value.detach().item() if value.numel() == 1 else "a tensor of shape " + str(tuple(value.shape))
    return {"value": value, "loss_calls": len(loss_calls), "backend": ctx.backend,
            "grads": [None if p.grad is None else _host(p.grad) for p in stage.parameters()]}


def _waiting_in(report) -> str | None:
    """"send" or "recv" for a rank stuck there (hung, or stopped by gloo's own
    timeout, which is the run's), "" for one stuck elsewhere, None if not stuck."""
    if report.status == "hung":
        text = report.describe()
    elif report.status == "error" and "Timed out" in report.error["message"]:
        text = report.error["message"]
    else:
        return None
    for op in ("send", "recv"):
        if f"waiting in {op}" in text or f"for {op} operation" in text:
            return op
    return ""


def _pipeline_failure(result, kind: str, n: int) -> str:
    for r in result.ranks:  # our own diagnosis from inside a rank comes first
        if r.status == "error" and r.error["type"] == "CheckFailed":
            return r.error["message"]
    what = f"pipeline_step failed on 2 ranks ({ref.pipeline_description(kind, n)})"
    output = "".join(r.output for r in result.ranks)
    stuck = [_waiting_in(r) for r in result.ranks]
    done = [r.status == "ok" for r in result.ranks]
    if "Received data size doesn't match" in output or "preamble.length" in output:
        hint = SHAPE_MISMATCH
    elif stuck[0] is not None and done[1]:
        hint = ("rank 1 returned while rank 0 still waits: rank 0 waits for a message rank 1 never sends (rank 1 must "
                "send the activation's gradient back after its backward), or sends one rank 1 never receives")
    elif stuck[1] is not None and done[0]:
        hint = ("rank 0 returned while rank 1 still waits: rank 1 waits for a message rank 0 never sends (rank 0 must "
                "send the header, ndim then shape, and then the activation), or sends one rank 0 never receives")
    elif stuck == ["send", "send"]:
        hint = ("a deadlock: both ranks are sending, neither is receiving, so a rank sends before its peer receives: "
                "the messages do not pair up (does rank 1 receive every message rank 0 sends, the header "
                "included, before it sends the gradient?). " + ORDER)
    elif stuck == ["recv", "recv"]:
        hint = ("a deadlock: both ranks are receiving, each waiting for a message the other sends only later "
                "(does rank 0 wait for the gradient before it has sent its activation?). " + ORDER)
    elif stuck[0] is not None and stuck[1] is not None:
        hint = "a deadlock: both ranks wait for each other. " + ORDER
    else:
        return describe_failure(result, what)
    return what + ": " + hint + "\n" + result.failure()


def _run_pipeline(g, kind: str, n: int):
    result = g.run_raw(_pipeline_in_rank, kind, n, world_size=2, timeout=PIPELINE_TIMEOUT)
    if not result.ok:
        if any(r.status == "error" and r.error["type"] in ("MissingTask", "NotImplementedError")
               for r in result.ranks):
            raise CheckFailed(describe_failure(result))
        raise CheckFailed(_pipeline_failure(result, kind, n))
    per_rank = [r.value for r in result.ranks]
    if not per_rank[1]["loss_calls"]:
        raise CheckFailed("rank 1 never called loss_fn: the loss must be loss_fn(output of rank 1's stage, targets), "
                          "with the loss_fn passed in, not a loss of your own")
    return per_rank, ref.pipeline_reference(kind, n)


def _check_pipeline_loss(per_rank, expected, kind, n):
    if per_rank[0]["value"] is not None:
        raise CheckFailed(f"rank 0 returned {per_rank[0]['value']!r}; the first stage has no loss and must "
                          "return None")
    value = per_rank[1]["value"]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise CheckFailed(f"rank 1 (the last stage) returned {value!r}; it must return the loss as a float "
                          "(loss.item())")
    assert_close(torch.tensor(float(value)), torch.tensor(expected["loss"]),
                 f"the loss returned by rank 1 ({ref.pipeline_description(kind, n)})",
                 "it must be loss_fn(stage output, targets) of the whole batch, computed from the activation "
                 "rank 0 sent; if rank 1's buffer is larger than the activation, dist.recv fills only its "
                 "beginning: allocate exactly the shape rank 0 sends", backend=per_rank[1]["backend"])


def _check_pipeline_grads(per_rank, expected, kind, n):
    for rank in (1, 0):  # the last stage first: rank 0's gradient comes from it
        got, want = per_rank[rank]["grads"], expected["grads"][rank]
        if any(gr is None for gr in got):
            how = ("rank 1 must send the received activation's .grad back to rank 0, and rank 0 must call "
                   "activation.backward(that gradient) on its stage's output" if rank == 0 else
                   "rank 1 must call backward() on the loss")
            raise CheckFailed(f"stage {rank} got no gradient: {how}")
        likely = ("rank 0's gradients come from activation.backward(grad), with the gradient of the loss with "
                  "respect to the activation it sent (the .grad of rank 1's received activation), called once"
                  if rank == 0 else
                  "rank 1 runs its stage on the received activation, computes loss_fn(output, targets) and calls "
                  "backward once")
        for i, (a, e) in enumerate(zip(got, want)):
            assert_close(a, e, f"stage {rank}, parameter {i}: gradient ({ref.pipeline_description(kind, n)})",
                         "each stage's gradients must equal those of the unsplit model, stage 1(stage 0(inputs)), "
                         "with the same loss_fn; " + likely, backend=per_rank[rank]["backend"])


@EXERCISE.check("pipeline_step", points=1, world_size=2)
def pipeline_loss_matches(g):
    """2 stages, 8 samples, MSELoss: rank 1 returns the unsplit model's loss, rank 0 returns None."""
    per_rank, expected = _run_pipeline(g, "mlp", 8)
    _check_pipeline_loss(per_rank, expected, "mlp", 8)


@EXERCISE.check("pipeline_step", points=3, world_size=2)
def pipeline_gradients_match(g):
    """2 stages, 8 samples, MSELoss: both stages' gradients equal the unsplit model's."""
    per_rank, expected = _run_pipeline(g, "mlp", 8)
    _check_pipeline_grads(per_rank, expected, "mlp", 8)


@EXERCISE.check("pipeline_step", points=1, hidden=True, world_size=2)
def pipeline_3d_activation_cross_entropy(g):
    """A non-contiguous 3-D activation (6, 3, 5) that rank 1's stage cannot reveal, CrossEntropyLoss with class targets."""
    per_rank, expected = _run_pipeline(g, "sequence", 6)
    _check_pipeline_loss(per_rank, expected, "sequence", 6)
    _check_pipeline_grads(per_rank, expected, "sequence", 6)


@EXERCISE.check("pipeline_step", points=1, hidden=True, world_size=2)
def pipeline_other_batch_sizes(g):
    """Batches of 3 (MSELoss) and 1 sample (MSELoss with reduction='sum')."""
    for kind, n in (("mlp", 3), ("mlp_sum", 1)):
        per_rank, expected = _run_pipeline(g, kind, n)
        _check_pipeline_loss(per_rank, expected, kind, n)
        _check_pipeline_grads(per_rank, expected, kind, n)
