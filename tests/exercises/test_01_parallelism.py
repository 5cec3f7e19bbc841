"""Exercise 01_parallelism: each typical mistake fails the check that targets it, with a message naming it (real
multi-process runs, like the grader). The solution's full marks, hidden checks included: tests/test_selfcheck.py
(test_each_solution_passes_every_check_of_every_task), from make selfcheck's grading."""

from __future__ import annotations

import pytest

from grader.exercises import get_exercise
from tests.helpers import assert_one_reason, assert_said_once, failed, grade_source, mutate, solution_source

EXERCISE = "01_parallelism"


@pytest.fixture(scope="module")
def solution():
    return solution_source(EXERCISE)


def grade_mutant(solution, old, new, task):
    """One mistake, one reason: every mutant's report has one check stating it, the others point to it."""
    report = grade_source(EXERCISE, mutate(solution, old, new), task=task)
    assert_said_once(report)
    return report, failed(report)


def grade_one_check(source, check_name):
    """Only one check: a deadlocking mutant costs a full timeout per check."""
    return failed(grade_source(EXERCISE, source, checks=[check_name]))


def test_solution_at_world_size_three(solution):
    # The visible checks follow the grader's --world-size (the pipeline stays at 2 ranks).
    report = grade_source(EXERCISE, solution, world_size=3)
    assert failed(report) == {}


# ------------------------------------------------------------ shard_indices
def test_shards_dropping_the_remainder(solution):
    _, bad = grade_mutant(solution, "size = base + (1 if rank < extra else 0)", "size = base", "shard_indices")
    assert "in no rank's share" in bad["shards_are_disjoint_covering_balanced"]


def test_shards_ignoring_rank(solution):
    _, bad = grade_mutant(solution, "start = rank * base + min(rank, extra)", "start = 0", "shard_indices")
    assert "disjoint" in bad["shards_are_disjoint_covering_balanced"]


def test_shards_remainder_on_last_rank(solution):
    _, bad = grade_mutant(
        solution,
        "start = rank * base + min(rank, extra)\n    size = base + (1 if rank < extra else 0)",
        "start = rank * base\n    size = base + (extra if rank == world_size - 1 else 0)",
        "shard_indices",
    )
    assert "differ by more than one" in bad["shards_are_disjoint_covering_balanced"]


# -------------------------------------------------------- average_gradients
def test_average_summing_without_dividing(solution):
    _, bad = grade_mutant(solution, "param.grad /= world_size", "pass", "average_gradients")
    assert "divide by the world size" in bad["averaged_gradients_match_full_batch"]


def test_average_crashing_on_missing_grad(solution):
    _, bad = grade_mutant(
        solution,
        "        if param.grad is None:  # frozen or unused: nothing to average\n            continue\n",
        "",
        "average_gradients",
    )
    assert set(bad) == {"averaged_gradients_three_ranks_frozen_layer"}
    # a hidden check shows the grader's words only, not the CheckFailed its rank code raised
    assert "your code failed a hidden test" in bad["averaged_gradients_three_ranks_frozen_layer"]


def test_average_reducing_the_weights(solution):
    _, bad = grade_mutant(
        solution,
        "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)",
        "dist.all_reduce(param.data, op=dist.ReduceOp.SUM)",
        "average_gradients",
    )
    assert "not the weights" in bad["averaged_gradients_match_full_batch"]


# ---------------------------------------------------------- ring_all_reduce
def test_ring_calling_all_reduce(solution):
    _, bad = grade_mutant(
        solution,
        "    if world_size == 1:\n        return\n",
        "    dist.all_reduce(tensor)\n    return\n",
        "ring_all_reduce",
    )
    assert "ring_all_reduce called dist.all_reduce: use only isend/irecv/send/recv" in bad["ring_sums_in_place"]


def test_ring_collective_imported_by_name(solution):
    source = mutate(
        solution,
        "    if world_size == 1:\n        return\n",
        "    from torch.distributed import broadcast\n    broadcast(tensor, 0)\n    return\n",
    )
    report = grade_source(EXERCISE, "from torch.distributed import all_gather\n" + source, task="ring_all_reduce")
    assert "called dist.broadcast" in failed(report)["ring_sums_in_place"]


@pytest.mark.parametrize(
    "spelling",
    [
        "    from torch.distributed import distributed_c10d\n    distributed_c10d.all_reduce(tensor)\n    return\n",
        "    import torch.distributed.nn.functional as F\n    tensor.copy_(F.all_reduce(tensor))\n    return\n",
        "    from torch.distributed import _functional_collectives as funcol\n"
        "    tensor.copy_(funcol.all_reduce(tensor, 'sum', dist.group.WORLD))\n    return\n",
        "    dist.all_reduce(tensor, async_op=True).wait()\n    return\n",
    ],
    ids=["distributed_c10d", "nn.functional", "functional collectives", "async_op"],
)
def test_ring_calling_all_reduce_in_any_spelling(solution, spelling):
    # The dispatcher sees the collective whatever its name: refused before any data moves.
    _, bad = grade_mutant(solution, "    if world_size == 1:\n        return\n", spelling, "ring_all_reduce")
    assert "ring_all_reduce called dist.all_reduce: use only isend/irecv/send/recv" in bad["ring_sums_in_place"]


def test_ring_catching_the_refusal_still_fails(solution):
    # An answer that swallows the refusal and goes on with the ring still used a collective.
    _, bad = grade_mutant(
        solution,
        "    if world_size == 1:\n        return\n",
        "    try:\n        dist.all_reduce(tensor.clone())\n    except Exception:\n        pass\n"
        "    if world_size == 1:\n        return\n",
        "ring_all_reduce",
    )
    assert "ring_all_reduce called dist.all_reduce" in bad["ring_sums_in_place"]


def test_ring_with_imported_p2p_names_gets_full_marks(solution):
    source = mutate(solution, "request = dist.isend(", "request = isend(")
    source = mutate(source, "        dist.recv(incoming, prev)", "        recv(incoming, prev)")
    report = grade_source(EXERCISE, "from torch.distributed import isend, recv\n" + source, task="ring_all_reduce")
    assert failed(report) == {}
    assert report.score == report.max_score == get_exercise(EXERCISE).points_of("ring_all_reduce")


def test_ring_blocking_send_deadlocks(solution):
    bad = grade_one_check(
        mutate(
            solution,
            "request = dist.isend(chunks[send_index].contiguous(), nxt)  # not blocking: every rank sends at once\n"
            "        dist.recv(incoming, prev)\n        request.wait()",
            "dist.send(chunks[send_index].contiguous(), nxt)\n        dist.recv(incoming, prev)",
        ),
        "ring_sums_in_place",
    )
    assert "deadlock" in bad["ring_sums_in_place"] and "blocking dist.send" in bad["ring_sums_in_place"]


def test_ring_not_in_place(solution):
    _, bad = grade_mutant(
        solution,
        "chunks = list(torch.tensor_split(tensor.view(-1), world_size))",
        "tensor = tensor.clone()\n    chunks = list(torch.tensor_split(tensor.view(-1), world_size))",
        "ring_all_reduce",
    )
    # The mutant returns nothing; the message still says where the sum must go.
    assert "sum in place" in bad["ring_sums_in_place"]


def test_ring_sending_whole_tensor(solution):
    naive = (
        "if world_size == 1:\n        return\n"
        "    other = torch.empty_like(tensor)\n"
        "    request = dist.isend(tensor.clone(), (rank + 1) % world_size)\n"
        "    dist.recv(other, (rank - 1) % world_size)\n"
        "    request.wait()\n"
        "    tensor += other\n"
        "    return\n"
    )
    _, bad = grade_mutant(solution, "if world_size == 1:\n        return\n", naive, "ring_all_reduce")
    assert "ring_sums_in_place" not in bad  # correct on 2 ranks...
    assert "chunks of at most" in bad["ring_passes_chunks_to_neighbours"]  # ...but not a ring


def test_ring_torch_chunk_on_short_tensor(solution):
    _, bad = grade_mutant(
        solution,
        "torch.tensor_split(tensor.view(-1), world_size)",
        "torch.chunk(tensor.view(-1), world_size)",
        "ring_all_reduce",
    )
    assert set(bad) == {"ring_three_ranks"}
    assert "torch.chunk returns fewer than world_size pieces" in bad["ring_three_ranks"]


# ----------------------------------------------------- ColumnParallelLinear
def test_column_autograd_all_gather_scales_gradients(solution):
    _, bad = grade_mutant(
        solution,
        "return _GatherColumns.apply(local, self.sizes)",
        "import torch.distributed.nn.functional as dist_nn\n"
        "        return torch.cat(dist_nn.all_gather(local), dim=-1)",
        "ColumnParallelLinear",
    )
    assert "column_parallel_forward" not in bad
    assert "2 times too large" in bad["column_parallel_shard_gradients"]


def test_column_plain_all_gather_loses_gradients(solution):
    _, bad = grade_mutant(
        solution,
        "return _GatherColumns.apply(local, self.sizes)",
        "parts = [torch.empty_like(local) for _ in self.sizes]\n"
        "        dist.all_gather(parts, local)\n"
        "        return torch.cat(parts, dim=-1)",
        "ColumnParallelLinear",
    )
    assert "column_parallel_forward" not in bad
    assert "no gradient reached the weight shard" in bad["column_parallel_shard_gradients"]


def test_column_without_input_gradient_reduction(solution):
    _, bad = grade_mutant(
        solution, "nn.functional.linear(_CopyToShards.apply(x), ", "nn.functional.linear(x, ", "ColumnParallelLinear"
    )
    assert set(bad) == {"column_parallel_input_gradient", "column_parallel_uneven_three_ranks"}
    assert "sum it over ranks in backward" in bad["column_parallel_input_gradient"]


def test_column_full_weight_on_every_rank(solution):
    _, bad = grade_mutant(solution, "rows = self.sizes[rank]", "rows = out_features", "ColumnParallelLinear")
    assert "rank r holds the output rows" in bad["column_parallel_forward"]


# ------------------------------------------------------------ pipeline_step
HEADER_SENT = (
    "        dist.send(torch.tensor([activation.dim()], dtype=torch.int64, device=inputs.device), dst=1)\n"
    "        dist.send(torch.tensor(activation.shape, dtype=torch.int64, device=inputs.device), dst=1)\n"
)
HEADER_RECEIVED = (
    "    ndim = torch.empty(1, dtype=torch.int64, device=targets.device)\n"
    "    dist.recv(ndim, src=0)\n"
    "    shape = torch.empty(int(ndim.item()), dtype=torch.int64, device=targets.device)\n"
    "    dist.recv(shape, src=0)\n"
    "    activation = torch.empty(shape.tolist(), device=targets.device)"
)
GUESSED_SHAPE = "    activation = torch.empty(len(targets), 5, device=targets.device)"  # right for the visible MLP only


def test_pipeline_received_activation_without_grad(solution):
    report, bad = grade_mutant(solution, "activation.requires_grad_(True)", "pass", "pipeline_step")
    assert "call activation.requires_grad_()" in bad["pipeline_loss_matches"]
    assert_one_reason(report, "pipeline_loss_matches")  # the gradients' check points to it


def test_pipeline_first_stage_without_backward(solution):
    _, bad = grade_mutant(solution, "activation.backward(grad)", "pass", "pipeline_step")
    assert "stage 0 got no gradient" in bad["pipeline_gradients_match"]
    assert "pipeline_loss_matches" not in bad


def test_pipeline_first_stage_returning_a_value(solution):
    _, bad = grade_mutant(solution, "        return None\n", "        return 0.0\n", "pipeline_step")
    assert "rank 0 returned 0.0" in bad["pipeline_loss_matches"] and "must return None" in bad["pipeline_loss_matches"]
    assert "pipeline_gradients_match" not in bad


def test_pipeline_guessing_the_activation_shape(solution):
    # No header: rank 1 allocates the visible MLP's shape, which fits the visible checks only.
    source = mutate(mutate(solution, HEADER_SENT, ""), HEADER_RECEIVED, GUESSED_SHAPE)
    bad = failed(grade_source(EXERCISE, source, task="pipeline_step"))
    assert set(bad) == {"pipeline_3d_activation_cross_entropy"}
    assert "Rank 1 cannot know the activation's shape" in bad["pipeline_3d_activation_cross_entropy"]


def test_pipeline_header_received_as_float(solution):
    _, bad = grade_mutant(
        solution,
        "ndim = torch.empty(1, dtype=torch.int64, device=targets.device)",
        "ndim = torch.empty(1, device=targets.device)",
        "pipeline_step",
    )
    assert "a shape (or dtype) mismatch" in bad["pipeline_loss_matches"]


def test_pipeline_sending_a_non_contiguous_activation(solution):
    _, bad = grade_mutant(
        solution,
        "dist.send(activation.detach().contiguous(), dst=1)",
        "dist.send(activation.detach(), dst=1)",
        "pipeline_step",
    )
    assert set(bad) == {"pipeline_3d_activation_cross_entropy"}
    # the diagnosis comes from inside a rank: a hidden check does not show it
    assert "hidden test of `pipeline_step`" in bad["pipeline_3d_activation_cross_entropy"]


def test_pipeline_activation_buffer_with_the_targets_dtype(solution):
    _, bad = grade_mutant(
        solution,
        "activation = torch.empty(shape.tolist(), device=targets.device)",
        "activation = torch.empty(shape.tolist(), dtype=targets.dtype, device=targets.device)",
        "pipeline_step",
    )
    assert set(bad) == {"pipeline_3d_activation_cross_entropy"}  # float targets hide it
    assert "hidden test of `pipeline_step`" in bad["pipeline_3d_activation_cross_entropy"]


def test_pipeline_own_loss_instead_of_loss_fn(solution):
    report, bad = grade_mutant(
        solution,
        "loss = loss_fn(stage(activation), targets)",
        "loss = torch.nn.functional.mse_loss(stage(activation), targets)",
        "pipeline_step",
    )
    assert "never called loss_fn" in bad["pipeline_loss_matches"]
    assert_one_reason(report, "pipeline_loss_matches")  # the hidden checks point to it, revealing nothing more


def test_pipeline_waiting_for_the_gradient_before_sending(solution):
    send = (
        "        dist.send(activation.detach().contiguous(), dst=1)  # send needs contiguous memory; no graph crosses\n"
    )
    receive = "        dist.recv(grad, src=1)\n"
    bad = grade_one_check(mutate(mutate(solution, send, ""), receive, receive + send), "pipeline_loss_matches")
    assert "both ranks are receiving" in bad["pipeline_loss_matches"]


def test_pipeline_header_sent_but_not_received(solution):
    # Rank 1 skips the header: rank 0 still sends it while rank 1 sends the gradient.
    bad = grade_one_check(mutate(solution, HEADER_RECEIVED, GUESSED_SHAPE), "pipeline_loss_matches")
    assert "a rank sends before its peer receives" in bad["pipeline_loss_matches"]


def test_pipeline_gradient_never_sent_back(solution):
    bad = grade_one_check(mutate(solution, "    dist.send(activation.grad, dst=0)\n", ""), "pipeline_loss_matches")
    assert "rank 1 must send the activation's gradient back" in bad["pipeline_loss_matches"]
