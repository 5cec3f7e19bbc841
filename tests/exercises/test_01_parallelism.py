"""Exercise 01_parallelism: the solution gets full marks, and each typical
mistake fails the check that targets it, with a message naming it (real
multi-process runs, like the grader)."""
from __future__ import annotations

import pytest

from tests.helpers import failed, grade_source, mutate, solution_source

EXERCISE = "01_parallelism"


@pytest.fixture(scope="module")
def solution():
    return solution_source(EXERCISE)


def grade_mutant(solution, old, new, task):
    report = grade_source(EXERCISE, mutate(solution, old, new), task=task)
    return report, failed(report)


def test_solution_gets_full_marks(solution):
    report = grade_source(EXERCISE, solution)
    assert failed(report) == {}
    assert report.score == report.max_score == 21
    assert {c.hidden for c in report.checks} == {True, False}


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
    _, bad = grade_mutant(solution, "start = rank * base + min(rank, extra)\n    size = base + (1 if rank < extra else 0)",
                          "start = rank * base\n    size = base + (extra if rank == world_size - 1 else 0)",
                          "shard_indices")
    assert "differ by more than one" in bad["shards_are_disjoint_covering_balanced"]


# -------------------------------------------------------- average_gradients
def test_average_summing_without_dividing(solution):
    _, bad = grade_mutant(solution, "param.grad /= world_size", "pass", "average_gradients")
    assert "divide by the world size" in bad["averaged_gradients_match_full_batch"]


def test_average_crashing_on_missing_grad(solution):
    _, bad = grade_mutant(solution, "        if param.grad is None:  # frozen or unused: nothing to average\n            continue\n",
                          "", "average_gradients")
    assert set(bad) == {"averaged_gradients_three_ranks_frozen_layer"}
    assert "skip parameters without a gradient" in bad["averaged_gradients_three_ranks_frozen_layer"]


def test_average_reducing_the_weights(solution):
    _, bad = grade_mutant(solution, "dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)",
                          "dist.all_reduce(param.data, op=dist.ReduceOp.SUM)", "average_gradients")
    assert "not the weights" in bad["averaged_gradients_match_full_batch"]


# ---------------------------------------------------------- ring_all_reduce
def test_ring_calling_all_reduce(solution):
    _, bad = grade_mutant(solution, "    if world_size == 1:\n        return\n",
                          "    dist.all_reduce(tensor)\n    return\n", "ring_all_reduce")
    assert "ring_all_reduce called dist.all_reduce: use only isend/irecv/send/recv" in bad["ring_sums_in_place"]


def test_ring_collective_imported_by_name(solution):
    source = mutate(solution, "    if world_size == 1:\n        return\n",
                    "    from torch.distributed import broadcast\n    broadcast(tensor, 0)\n    return\n")
    report = grade_source(EXERCISE, "from torch.distributed import all_gather\n" + source, task="ring_all_reduce")
    assert "called dist.broadcast" in failed(report)["ring_sums_in_place"]


def test_ring_blocking_send_deadlocks(solution):
    report, bad = grade_mutant(
        solution,
        "request = dist.isend(chunks[send_index].contiguous(), nxt)  # not blocking: every rank sends at once\n"
        "        dist.recv(incoming, prev)\n        request.wait()",
        "dist.send(chunks[send_index].contiguous(), nxt)\n        dist.recv(incoming, prev)",
        "ring_all_reduce")
    assert "deadlock" in bad["ring_sums_in_place"] and "blocking dist.send" in bad["ring_sums_in_place"]


def test_ring_not_in_place(solution):
    _, bad = grade_mutant(solution, "chunks = list(torch.tensor_split(tensor.view(-1), world_size))",
                          "tensor = tensor.clone()\n    chunks = list(torch.tensor_split(tensor.view(-1), world_size))",
                          "ring_all_reduce")
    # The mutant returns nothing; the message still says where the sum must go.
    assert "sum in place" in bad["ring_sums_in_place"]


def test_ring_sending_whole_tensor(solution):
    naive = ("if world_size == 1:\n        return\n"
             "    other = torch.empty_like(tensor)\n"
             "    request = dist.isend(tensor.clone(), (rank + 1) % world_size)\n"
             "    dist.recv(other, (rank - 1) % world_size)\n"
             "    request.wait()\n"
             "    tensor += other\n"
             "    return\n")
    _, bad = grade_mutant(solution, "if world_size == 1:\n        return\n", naive, "ring_all_reduce")
    assert "ring_sums_in_place" not in bad  # correct on 2 ranks...
    assert "chunks of at most" in bad["ring_passes_chunks_to_neighbours"]  # ...but not a ring


def test_ring_torch_chunk_on_short_tensor(solution):
    _, bad = grade_mutant(solution, "torch.tensor_split(tensor.view(-1), world_size)",
                          "torch.chunk(tensor.view(-1), world_size)", "ring_all_reduce")
    assert set(bad) == {"ring_three_ranks"}
    assert "torch.chunk returns fewer than world_size pieces" in bad["ring_three_ranks"]


# ----------------------------------------------------- ColumnParallelLinear
def test_column_autograd_all_gather_scales_gradients(solution):
    _, bad = grade_mutant(solution, "return _GatherColumns.apply(local, self.sizes)",
                          "import torch.distributed.nn.functional as dist_nn\n"
                          "        return torch.cat(dist_nn.all_gather(local), dim=-1)", "ColumnParallelLinear")
    assert "column_parallel_forward" not in bad
    assert "2 times too large" in bad["column_parallel_shard_gradients"]


def test_column_plain_all_gather_loses_gradients(solution):
    _, bad = grade_mutant(solution, "return _GatherColumns.apply(local, self.sizes)",
                          "parts = [torch.empty_like(local) for _ in self.sizes]\n"
                          "        dist.all_gather(parts, local)\n"
                          "        return torch.cat(parts, dim=-1)", "ColumnParallelLinear")
    assert "column_parallel_forward" not in bad
    assert "no gradient reached the weight shard" in bad["column_parallel_shard_gradients"]


def test_column_without_input_gradient_reduction(solution):
    _, bad = grade_mutant(solution, "nn.functional.linear(_CopyToShards.apply(x), ",
                          "nn.functional.linear(x, ", "ColumnParallelLinear")
    assert set(bad) == {"column_parallel_input_gradient", "column_parallel_uneven_three_ranks"}
    assert "sum it over ranks in backward" in bad["column_parallel_input_gradient"]


def test_column_full_weight_on_every_rank(solution):
    _, bad = grade_mutant(solution, "rows = self.sizes[rank]", "rows = out_features", "ColumnParallelLinear")
    assert "rank r holds the output rows" in bad["column_parallel_forward"]


# ------------------------------------------------------ pipeline_train_step
def test_pipeline_summing_microbatch_losses(solution):
    _, bad = grade_mutant(solution, " * (len(part) / len(x))", "", "pipeline_train_step")
    assert "4 times too large" in bad["pipeline_gradients_match"]
    assert "n_microbatches = 4 times the batch's mean loss" in bad["pipeline_loss_matches"]
    assert "pipeline_uses_microbatches" not in bad


def test_pipeline_plain_mean_of_microbatches(solution):
    _, bad = grade_mutant(solution, " * (len(part) / len(x))", " / n_microbatches", "pipeline_train_step")
    assert set(bad) == {"pipeline_uneven_microbatches"}  # equal micro-batches hide it


def test_pipeline_whole_batch(solution):
    _, bad = grade_mutant(solution, "x_parts = torch.tensor_split(x, n_microbatches)\n"
                          "    y_parts = torch.tensor_split(y, n_microbatches)",
                          "x_parts, y_parts = [x], [y]", "pipeline_train_step")
    assert "once per micro-batch" in bad["pipeline_uses_microbatches"]
    assert "pipeline_loss_matches" not in bad and "pipeline_gradients_match" not in bad


def test_pipeline_received_activation_without_grad(solution):
    _, bad = grade_mutant(solution, "activation.requires_grad_(True)", "pass", "pipeline_train_step")
    assert "call activation.requires_grad_()" in bad["pipeline_gradients_match"]


def test_pipeline_first_stage_without_backward(solution):
    _, bad = grade_mutant(solution, "activation.backward(grad)", "pass", "pipeline_train_step")
    assert "stage 0 got no gradient" in bad["pipeline_gradients_match"]
    assert "pipeline_loss_matches" not in bad
